"""One registry contract (``fp4lab.registry.SpecRegistry``) over the three registries: formats, hwspecs, recipes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

import fp4lab
from fp4lab import formats, hwspec, recipes
from fp4lab.errors import Fp4labError, InputError, SpecError, UnknownFormatError, UnknownRecipeError
from fp4lab.formats.registry import FORMATS
from fp4lab.formats.spec_io import model_to_toml
from fp4lab.hwspec.registry import HW
from fp4lab.recipes.config import RECIPES
from fp4lab.registry import SpecRegistry, spec_names


@dataclass(frozen=True)
class Case:
    registry: SpecRegistry
    names: Callable[[], list[str]]  # the public functions, which must be the registry's verbs
    get: Callable[[Any], Any]
    load: Callable[[Any], Any]
    register: Callable[..., Any]
    unknown: type[Fp4labError]
    suffix: str
    dump: Callable[[Any], str]  # a spec object as the text of a file of ``suffix``


CASES = {
    "format": Case(FORMATS, fp4lab.list_formats, fp4lab.get_format, fp4lab.load_format, formats.register,
                   UnknownFormatError, ".toml", model_to_toml),
    "hw": Case(HW, fp4lab.list_hw, fp4lab.get_hw, hwspec.load_hw, hwspec.register_hw, SpecError, ".json",
               lambda spec: json.dumps(hwspec.spec_to_dict(spec))),
    "recipe": Case(RECIPES, recipes.list_recipes, recipes.get_recipe, recipes.load_recipe, recipes.register,
                   UnknownRecipeError, ".toml", recipes.recipe_to_toml),
}


@pytest.fixture(params=list(CASES))
def case(request, monkeypatch) -> Case:
    c = CASES[request.param]
    monkeypatch.setattr(c.registry, "_registered", {})  # none registered by other tests; none left to them
    return c


def _user(c: Case, description: str = "a user object") -> Any:
    """A copy of the first built-in under a name no built-in has."""
    first = c.get(c.registry.builtin_names[0])
    return first.model_copy(update={"name": f"test-registry-{c.registry.kind}", "description": description})


def test_builtins_are_the_folder_listed_first(case):
    reg = case.registry
    assert set(reg.builtin_names) == {p.stem for p in reg.folder.glob("*.toml")} and len(reg.builtin_names) > 1
    assert case.names() == reg.names() == list(reg.builtin_names)
    obj = case.register(_user(case))
    assert case.names() == list(reg.builtin_names) + [obj.name]
    assert dict(reg.builtins) == {n: case.get(n) for n in reg.builtin_names}


def test_get_takes_a_name_a_path_or_an_object(case, tmp_path):
    name = case.registry.builtin_names[-1]
    obj = case.get(name)
    assert obj.name == name and case.get(name) is obj and case.get(obj) is obj
    user = _user(case)
    path = tmp_path / f"user{case.suffix}"
    path.write_text(case.dump(user))
    assert case.get(path) == case.get(str(path)) == case.load(path) == user
    assert user.name not in case.names()  # a loaded file is not registered
    with pytest.raises(SpecError, match=r"missing\.toml: .*not found"):
        case.get(str(tmp_path / "missing.toml"))  # a spec suffix makes a path, never a name


def test_unknown_name_is_one_line_listing_the_known_ones(case):
    reg = case.registry
    first = reg.builtin_names[0]
    with pytest.raises(case.unknown) as info:
        case.get(first + "z")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"unknown {reg.kind} '{first}z'; did you mean '{first}'")
    assert msg.endswith(f"built-in {reg.plural}: {', '.join(reg.builtin_names)}")
    user = case.register(_user(case))
    with pytest.raises(case.unknown, match=f"registered: {user.name}; built-in"):
        case.get("no/such/name")
    with pytest.raises(case.unknown, match=f"{reg.kind} must be a name, a spec-file path or a"):
        case.get(42)


def test_register_and_overwrite(case):
    builtin = case.get(case.registry.builtin_names[0])
    with pytest.raises(InputError, match=f"'{builtin.name}' is a built-in {case.registry.kind} name"):
        case.register(builtin.model_copy(update={"description": "mine"}), overwrite=True)
    user = _user(case)
    assert case.register(user) is user and case.get(user.name) is user
    assert case.register(user.model_copy()) is not None  # an equal object again is harmless
    other = _user(case, "another user object")
    with pytest.raises(InputError, match=f"a different {case.registry.kind} named '{user.name}' is already registered"):
        case.register(other)
    assert case.get(user.name) == user
    assert case.register(other, overwrite=True) is other and case.get(user.name) is other
    with pytest.raises(InputError, match="register: expected a"):
        case.register("not an object")


@pytest.mark.parametrize("suffix, text", [(".toml", "name = \n"), (".json", "{\"name\": "), (".toml", "[1]\n")])
def test_malformed_file_names_the_file(case, tmp_path, suffix, text):
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    for call in (case.load, case.get):
        with pytest.raises(SpecError) as info:
            call(str(path))
        assert isinstance(info.value, Fp4labError)
        assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)


def test_builtins_load_on_first_use_and_must_match_their_file(tmp_path):
    loads: list[Path] = []

    def loader(path):
        loads.append(Path(path))
        return fp4lab.load_format(path)

    for name, declared in (("b", "b"), ("a", "a"), ("c", "not-c")):
        (tmp_path / f"{name}.toml").write_text(f'name = "{declared}"\nelement = "e2m1"\n')
    reg = SpecRegistry(fp4lab.QuantFormat, tmp_path, loader, kind="format", plural="formats", display_first=("c",))
    assert reg.names() == ["c", "a", "b"] == list(spec_names(tmp_path, ("c", "no-such-file"))) and loads == []
    assert reg.get("b") is reg.get("b") and loads == [tmp_path / "b.toml"]
    with pytest.raises(SpecError, match=r"c\.toml: built-in file declares name 'not-c', expected 'c'"):
        reg.get("c")
