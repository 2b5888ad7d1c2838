"""Whole models: ``quantize_model`` swaps a model's ``nn.Linear`` layers for ``QuantLinear`` layers of a recipe, and
``layer_steps`` / ``set_layer_steps`` read and restore the random-stream steps of its layers (which ``state_dict``
leaves out, so that a checkpoint loads into plain ``nn.Linear`` layers too)."""

from __future__ import annotations

import fnmatch
import sys
import warnings
from typing import Any

import torch

from fp4lab.errors import InputError
from fp4lab.recipes.config import Recipe, get_recipe
from fp4lab.recipes.linear import QuantLinear, check_convertible, check_step, features_fit, take_over


def quantize_model(model: torch.nn.Module, recipe: Any, seed: int = 0,
                   skip: str | tuple[str, ...] = ()) -> torch.nn.Module:
    """Replace every ``nn.Linear`` of ``model`` by a ``QuantLinear`` sharing its parameters, in place; returns the
    model. Layers whose qualified name matches a pattern of ``skip`` (fnmatch patterns, e.g. ``"lm_head"``,
    ``"blocks.0.*"``; a string is one pattern) stay as they are. Layers matching the recipe's ``high_precision``,
    layers whose widths are not multiples of the recipe's block sizes and the ``out_proj`` of
    ``nn.MultiheadAttention`` (which reads its weight and never calls it) are left in high precision (a warning
    names the last two kinds): a plain ``nn.Linear`` (a ``QuantLinear`` of an earlier conversion becomes one
    again, sharing its parameters). Each layer's random streams derive from its qualified name (and ``seed``,
    which shifts every stream of the model). Names are those of the model as written: ``torch.compile`` wrappers
    add nothing to them. A layer reached under several names (one module used twice) becomes one QuantLinear,
    named by its first name, at every place. A ``QuantLinear`` of another recipe takes this recipe, keeping its
    parameters, stream and step. Each QuantLinear takes the train/eval mode and the hooks of the layer it
    replaces (``QuantLinear.from_linear``). Subclasses of ``nn.Linear`` with a forward of their own or further
    parameters, buffers or modules stay as they are (a warning names them): a QuantLinear would drop those."""
    r = get_recipe(recipe)
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"quantize_model: model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(model, torch.nn.Linear):
        raise InputError("quantize_model: the model itself is an nn.Linear; wrap it (e.g. in nn.Sequential) or use "
                         "QuantLinear.from_linear")
    if isinstance(skip, str):
        skip = (skip,)  # one pattern, not its characters
    if not isinstance(skip, (tuple, list, set)) or not all(isinstance(p, str) for p in skip):
        raise InputError(f"quantize_model: skip must be a pattern or a tuple of patterns (strings), got {skip!r}")
    skip = tuple(skip)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"quantize_model: seed must be an int, got {seed!r}")
    unfit: list[str] = []
    bypassed: list[str] = []  # out_proj of nn.MultiheadAttention: its weight is used, its forward never runs
    custom: list[str] = []  # nn.Linear subclasses with a forward or state of their own
    done: dict[int, torch.nn.Module] = {}  # id of a linear layer -> what stands in its places
    for path, child in list(model.named_modules(remove_duplicate=False)):
        if isinstance(child, torch.nn.MultiheadAttention) and id(child.out_proj) not in done:
            done[id(child.out_proj)] = _plain(child.out_proj)
            bypassed.append(_model_name(model, f"{path}.out_proj" if path else "out_proj"))
        if not isinstance(child, torch.nn.Linear) or not path:
            continue
        if id(child) not in done:
            done[id(child)] = _converted(child, _model_name(model, path), r, seed, skip, unfit, custom)
        if done[id(child)] is not child:
            parent, _, attr = path.rpartition(".")
            owner = model.get_submodule(parent) if parent else model
            if _compiled_wrapper(owner):  # its compiled forward is bound to child
                raise InputError(f"quantize_model: layer '{_model_name(model, path)}' is an nn.Linear compiled on "
                                 "its own (torch.compile(linear)); convert it before compiling it")
            setattr(owner, attr, done[id(child)])
    names = {_model_name(model, path) for path, m in model.named_modules(remove_duplicate=False)
             if isinstance(m, torch.nn.Linear) and path}
    unmatched = [f"{p!r} ({where})" for where, patterns in (("skip", skip), ("high_precision", r.high_precision))
                 for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    for kept, why in ((bypassed, "in high precision that nn.MultiheadAttention runs from their weights without "
                       "calling them"),
                      (custom, "as they are whose class changes nn.Linear's forward or adds parameters, buffers or "
                       "modules, which a QuantLinear would drop"),
                      (unfit, f"in high precision whose widths are not multiples of recipe '{r.name}''s block sizes")):
        if kept:
            warnings.warn(f"quantize_model: kept {len(kept)} linear layer(s) {why}: {', '.join(kept)}", stacklevel=2)
    if unmatched:
        warnings.warn(f"quantize_model: pattern(s) matching no linear layer of the model: {', '.join(unmatched)}",
                      stacklevel=2)
    return model


def _compiled_wrapper(m: torch.nn.Module) -> bool:
    """Whether ``m`` is the wrapper ``torch.compile`` returns for a module (which exists only once torch._dynamo is
    imported: not importing it here spares a process that never compiles its import time)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return eval_frame is not None and isinstance(m, eval_frame.OptimizedModule)


def _model_name(model: torch.nn.Module, path: str) -> str:
    """The qualified name of the module at ``path`` in the user's model: without the ``_orig_mod`` steps of
    ``torch.compile`` wrappers (so patterns and random streams do not depend on whether the model, or a block of
    it, was compiled first)."""
    return ".".join(p for p in path.split(".") if p != "_orig_mod")


def _converted(child: torch.nn.Linear, name: str, r: Recipe, seed: int, skip: tuple[str, ...],
               unfit: list[str], custom: list[str]) -> torch.nn.Module:
    """What ``quantize_model`` puts in the places of ``child`` (first reached as ``name``); layers kept for their
    widths are added to ``unfit``, subclasses of ``nn.Linear`` that compute something else to ``custom``."""
    if any(fnmatch.fnmatchcase(name, p) for p in skip):
        return child
    if any(fnmatch.fnmatchcase(name, p) for p in r.high_precision):
        return _plain(child)
    if not features_fit(r, child):
        unfit.append(f"{name} ({child.in_features} -> {child.out_features})")
        return _plain(child)
    if isinstance(child, QuantLinear) and child.recipe == r:
        return child
    check_convertible(child, f"quantize_model: layer '{name}'")
    if not isinstance(child, QuantLinear) and not _plain_linear(child):
        custom.append(f"{name} ({type(child).__name__})")
        return child
    return QuantLinear.from_linear(child, r, name=f"{seed}:{name}" if seed else name)


def _plain_linear(linear: torch.nn.Linear) -> bool:
    """Whether ``linear`` computes what ``nn.Linear`` does from its weight and bias alone (its class keeps
    ``nn.Linear.forward`` and it holds no other parameters, buffers or modules), so a QuantLinear can replace it."""
    return (type(linear).forward is torch.nn.Linear.forward and set(linear._parameters) <= {"weight", "bias"}
            and not linear._buffers and not linear._modules)


def _plain(child: torch.nn.Linear) -> torch.nn.Linear:
    """``child`` in high precision: itself, or for a ``QuantLinear`` an ``nn.Linear`` sharing its parameters."""
    if not isinstance(child, QuantLinear):
        return child
    plain = torch.nn.Linear(child.in_features, child.out_features, bias=child.bias is not None, device="meta")
    plain.weight = child.weight
    plain.bias = child.bias
    take_over(plain, child)
    return plain


def _quant_layers(model: Any, where: str) -> dict[str, QuantLinear]:
    """Every ``QuantLinear`` of ``model`` by qualified name as ``quantize_model`` names layers (a layer used twice
    under its first name)."""
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"{where}: model must be a torch.nn.Module, got {type(model).__name__}")
    return {_model_name(model, path): m for path, m in model.named_modules() if isinstance(m, QuantLinear)}


def _listed(names: list[str]) -> str:
    """At most five names, then an ellipsis."""
    return ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")


def layer_steps(model: torch.nn.Module) -> dict[str, int]:
    """The step of every ``QuantLinear`` of ``model`` (``QuantLinear.step``: backward passes that drew
    stochastic-rounding bits), by qualified name. Save it beside ``state_dict`` to resume training with the random
    streams where they were; reading it waits for the device."""
    return {name: m.step for name, m in _quant_layers(model, "layer_steps").items()}


def set_layer_steps(model: torch.nn.Module, steps: dict[str, int]) -> None:
    """Set the step of every ``QuantLinear`` of ``model`` from ``steps`` (as ``layer_steps`` gives it, e.g. from a
    checkpoint). Like ``load_state_dict(strict=True)``, a layer missing from ``steps`` or a name that is no
    QuantLinear of the model is an error, and nothing is set then."""
    layers = _quant_layers(model, "set_layer_steps")
    if not isinstance(steps, dict):
        raise InputError(f"set_layer_steps: steps must be a dict of layer name -> step, got {type(steps).__name__}")
    missing = sorted(set(layers) - set(steps))
    unknown = sorted(str(n) for n in set(steps) - set(layers))
    problems = ([f"no step for {_listed(missing)}"] if missing else []) + \
        ([f"no QuantLinear named {_listed(unknown)}"] if unknown else [])
    if problems:
        raise InputError(f"set_layer_steps: {'; '.join(problems)}")
    checked = {name: check_step(f"set_layer_steps: layer '{name}'", steps[name]) for name in layers}  # all first
    for name, layer in layers.items():
        layer.step = checked[name]
