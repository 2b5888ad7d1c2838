"""Errors speak to the user: one line naming the file / field / argument, what was wrong and what is allowed."""

from __future__ import annotations

import numpy as np
import pytest

import fp4lab
from fp4lab.errors import Fp4labError, InputError, SpecError, UnknownFormatError
from fp4lab.formats import ROUNDING_MODES, QuantFormat

F32 = np.float32

SPECS = {
    "malformed": ('name = "x"\nelement = "e2m1\n', "not valid TOML"),
    "unknown_field": ('name = "x"\nelement = "e2m1"\ncolour = "red"\n', "unknown field 'colour'"),
    "misspelt_field": ('name = "x"\nelement = "e2m1"\ntensorscale = "amax"\n',
                       "unknown field 'tensorscale' (did you mean 'tensor_scale'"),
    "misspelt_nested_field": ('name = "x"\nelement = "e2m1"\nblock = 16\nscale = "fp32"\n'
                              '[scale_rule]\nmethd = "amax"\n',
                              "scale_rule: unknown field 'methd' (did you mean 'method'?)"),
    "misspelt_kind": ('name = "x"\n[element]\nkind = "flot"\n',
                      "element: unknown kind 'flot' (did you mean 'float'?); use 'float', 'int' or 'table'"),
    "kind_missing": ('name = "x"\n[element]\nexponent_bits = 1\nmantissa_bits = 2\n',
                     "element: the table needs a 'kind' field: 'float', 'int' or 'table'"),
    "name_missing": ('element = "e2m1"\n', "missing required field 'name'"),
    "python_attribute": ('name = "x"\n[element]\nkind = "int"\nint_bits = 3\n',
                         "element: unknown field 'int_bits' (did you mean 'bits'?)"),
    "level_count": ('name = "x"\n[element]\nkind = "table"\nbits = 4\nvalues = [0.0, 1.0, 2.0]\n',
                    "'values' has 3 entries, 4 bits need 16"),
    "duplicate": ('name = "x"\n[element]\nkind = "table"\nbits = 2\nvalues = [0.0, 1.0, 1.0, -1.0]\n',
                  "repeats a non-zero value"),
    "no_zero": ('name = "x"\n[element]\nkind = "table"\nbits = 2\nvalues = [0.5, 1.0, 2.0, -1.0]\n',
                "zero must be one of the values"),
    "inexact": ('name = "x"\n[element]\nkind = "table"\nbits = 2\nvalues = [0.0, 0.1, 2.0, -1.0]\n',
                "0.1 is not exactly representable in float32; use 0.10000000149011612"),
    "unsorted_magnitudes": ('name = "x"\n[element]\nkind = "table"\nbits = 3\nmagnitudes = [0.0, 2.0, 1.0, 3.0]\n',
                            "'magnitudes' must start at 0 and be strictly ascending"),
    "unknown_element": ('name = "x"\nelement = "e9m9"\n', "element 'e9m9' is not a known name"),
    "unknown_scale": ('name = "x"\nelement = "e2m1"\nblock = 32\nscale = "e9m0"\n[scale_rule]\nmethod = "floor"\n',
                      "scale 'e9m0' is not a known name"),
    "block_zero": ('name = "x"\nelement = "e2m1"\nblock = { shape = [0] }\nscale = "e8m0"\n[scale_rule]\n'
                   'method = "floor"\n', "each extent must be between 1 and 4096"),
    "block_3d": ('name = "x"\nelement = "e2m1"\nblock = { shape = [2, 2, 2] }\nscale = "e8m0"\n[scale_rule]\n'
                 'method = "floor"\n', "block.shape"),
    "floor_needs_pow2": ('name = "x"\nelement = "e2m1"\nblock = 32\nscale = "ue4m3"\n[scale_rule]\nmethod = "floor"\n',
                         "'floor' is an exponent rule and needs a pow2 scale (e8m0), not 'float'"),
    "even_needs_float_grid": ('name = "x"\nelement = "int4"\nblock = 32\nscale = "e8m0"\n[scale_rule]\n'
                              'method = "even"\n', "it needs a float element grid"),
    "tensor_scale_fp32": ('name = "x"\nelement = "e2m1"\nblock = 16\nscale = "fp32"\ntensor_scale = "amax"\n'
                          '[scale_rule]\nmethod = "amax"\n', "a tensor scale needs a narrow block-scale format"),
    "scale_without_block": ('name = "x"\nelement = "e2m1"\nscale = "e8m0"\n[scale_rule]\nmethod = "floor"\n',
                            "needs both 'block' and 'scale'"),
    "bad_rounding": ('name = "x"\nelement = "e2m1"\nrounding = "nearest"\n', "rounding"),
    "bad_name": ('name = "has space"\nelement = "e2m1"\n', "name"),
    "overflow_nan_without_nan": ('name = "x"\nelement = "e2m1"\noverflow = "nan"\n', "element grid has no NaN code"),
    "clamps_reversed": ('name = "x"\nelement = "e2m1"\nblock = 16\nscale = "fp32"\n[scale_rule]\nmethod = "amax"\n'
                        'min_scale = 2.0\nmax_scale = 1.0\n', "min_scale 2.0 exceeds max_scale 1.0"),
    "wrong_type": ('name = "x"\n[element]\nkind = "float"\nexponent_bits = "two"\nmantissa_bits = 1\n',
                   "element.exponent_bits"),
}


@pytest.mark.parametrize("case", list(SPECS))
def test_spec_errors_are_one_line_naming_file_and_field(case, tmp_path):
    text, expected = SPECS[case]
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        fp4lab.load_format(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(str(path) + ": ")
    assert expected in msg


def test_a_spec_file_of_another_kind_says_which_kind_it_looks_like(tmp_path):
    """An hwspec, format or recipe file handed to another kind's loader: the error names the kind it looks like
    and the command that takes it; a file of the right kind with a typo gets no such note."""
    from fp4lab.hwspec import load_hw
    from fp4lab.recipes import load_recipe

    hw = tmp_path / "hw.toml"
    hw.write_text('name = "h"\nvendor = "v"\narch = "a"\nprovenance = "assumed"\nsource = "s"\n'
                  'inherits = "hopper-sm90"\n')
    fmt = tmp_path / "fmt.toml"
    fmt.write_text('name = "f"\nelement = "e2m1"\n')
    recipe = tmp_path / "recipe.toml"
    recipe.write_text('name = "r"\nformat = "ufp4"\n')
    with pytest.raises(SpecError, match=r"looks like an accelerator spec: try fp4lab hw show"):
        fp4lab.load_format(hw)
    with pytest.raises(SpecError, match=r"looks like a format spec: try fp4lab show"):
        load_hw(fmt)
    with pytest.raises(SpecError, match=r"looks like a format spec: try fp4lab show"):
        load_recipe(fmt)
    with pytest.raises(SpecError, match=r"looks like a training recipe: try fp4lab recipes show"):
        fp4lab.load_format(recipe)
    typo = tmp_path / "typo.toml"
    typo.write_text('name = "t"\nelement = "e2m1"\nroundng = "rtne"\n')
    with pytest.raises(SpecError) as info:
        fp4lab.load_format(typo)
    assert "looks like" not in str(info.value) and "\n" not in str(info.value)


def test_missing_spec_file(tmp_path):
    with pytest.raises(SpecError, match=r"missing\.toml: spec file not found$"):
        fp4lab.load_format(tmp_path / "missing.toml")


def test_unknown_format_name_lists_the_known_ones():
    with pytest.raises(UnknownFormatError) as info:
        fp4lab.get_format("mxfp5")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("unknown format 'mxfp5'") and "mxfp4" in msg and "nvfp4" in msg


def test_register_refuses_builtin_and_conflicting_names():
    with pytest.raises(ValueError, match="'mxfp4' is a built-in format name"):
        fp4lab.register(QuantFormat(name="mxfp4", element="e2m1"))
    fp4lab.register(QuantFormat(name="test-errors-a", element="e2m1"))
    with pytest.raises(ValueError, match="a different format named 'test-errors-a' is already registered"):
        fp4lab.register(QuantFormat(name="test-errors-a", element="e1m2"))
    assert fp4lab.register(QuantFormat(name="test-errors-a", element="e1m2"), overwrite=True).element.name == "e1m2"


QUANTIZE_ERRORS = [
    (lambda: fp4lab.quantize(np.arange(32), "mxfp4"), InputError, "dtype int64; expected float16, float32 or float64"),
    (lambda: fp4lab.quantize(np.zeros(31, F32), "mxfp4"), InputError,
     "axis 0 has length 31, not a multiple of format 'mxfp4' block size 32"),
    (lambda: fp4lab.quantize(np.zeros((32, 31), F32), "mxfp4", axis=-1), InputError, "axis 1 has length 31"),
    (lambda: fp4lab.quantize(np.zeros((2, 32), F32), "mxfp4", axis=5), InputError,
     "axis 5 is out of range for a 2-D input"),
    (lambda: fp4lab.quantize(np.zeros(32, F32), "nvfp4-2d"), InputError, "16x16 tiles; input must be at least 2-D"),
    (lambda: fp4lab.quantize(np.zeros((16, 24), F32), "nvfp4-2d"), InputError, "tile extent 16"),
    (lambda: fp4lab.quantize(np.zeros(32, F32), "mxfp4", rounding="nearest"), ValueError,
     f"rounding 'nearest' is unknown; use one of {', '.join(ROUNDING_MODES)}"),
    (lambda: fp4lab.quantize(np.zeros(32, F32), "no-such-format"), UnknownFormatError,
     "unknown format 'no-such-format'"),
    (lambda: fp4lab.quantize(np.array(1.0, F32), "mxfp4"), InputError, "quantize"),
    (lambda: fp4lab.quantize(np.array(["a"] * 32), "mxfp4"), InputError, "expected float16, float32 or float64"),
]


@pytest.mark.parametrize("i", range(len(QUANTIZE_ERRORS)))
def test_quantize_errors(i):
    call, exc, expected = QUANTIZE_ERRORS[i]
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg and expected in msg


def test_torch_integer_tensor_is_rejected():
    torch = pytest.importorskip("torch")
    with pytest.raises(InputError, match="dtype torch.int64; expected a floating-point tensor"):
        fp4lab.quantize(torch.arange(32), "mxfp4")


def test_packing_needs_four_bit_codes():
    fmt = QuantFormat(name="test-e4m3-elem", element="e4m3")
    with pytest.raises(ValueError, match="has 8-bit codes; only <= 4 pack"):
        fp4lab.quantize(np.zeros(4, F32), fmt).packed()


def test_spec_errors_list_every_error(tmp_path):
    path = tmp_path / "many.toml"
    path.write_text('name = "x"\nelement = "e2m1"\ntensorscale = "amax"\nrounding = "nearest"\nblock = 16\n'
                    'scale = "fp32"\n[scale_rule]\nmethd = "amax"\nmin_scale = -1.0\n')
    with pytest.raises(SpecError) as info:
        fp4lab.load_format(path)
    msg = str(info.value)
    assert "\n" not in msg and "more)" not in msg
    assert msg.startswith(f"{path}: 4 errors: ")
    for part in ("unknown field 'tensorscale' (did you mean 'tensor_scale'", "rounding: Input should be 'rtne'",
                 "(got 'nearest')", "scale_rule: unknown field 'methd' (did you mean 'method'?)",
                 "scale_rule.min_scale: Input should be greater than 0 (got -1.0)"):
        assert part in msg


def test_unknown_names_suggest_the_closest():
    with pytest.raises(UnknownFormatError, match="unknown format 'nvfp5'.*did you mean 'nvfp4'"):
        fp4lab.get_format("nvfp5")
    with pytest.raises(SpecError, match="unknown hw 'hoper-sm90'; did you mean 'hopper-sm90'"):
        fp4lab.get_hw("hoper-sm90")
    from fp4lab.recipes import get_recipe

    with pytest.raises(Fp4labError, match="unknown recipe 'ufp5'.*did you mean 'ufp4'"):
        get_recipe("ufp5")


@pytest.mark.parametrize("argv, usage", [
    (["compare", "--bogus"], "usage: fp4lab compare"),
    (["hw", "show", "hopper-sm90", "--nope"], "usage: fp4lab hw show"),
    (["spec", "validate", "--kindx", "a.toml"], "usage: fp4lab spec validate"),
    (["recipes", "show", "ufp4", "--x"], "usage: fp4lab recipes show"),
])
def test_unknown_option_prints_the_subcommands_usage(capsys, argv, usage):
    from fp4lab.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    extra = argv[-2] if argv[-1].endswith(".toml") else argv[-1]
    assert err.startswith(usage) and f"unrecognized arguments: {extra}" in err


def test_misspelt_option_suggests_the_closest(capsys):
    from fp4lab.cli import main

    with pytest.raises(SystemExit):
        main(["compare", "--rht-sed", "3"])
    assert "(did you mean '--rht-seed'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, option", [
    (["compare", "--rounding", "foo"], "--rounding"),
    (["compare", "--rht-seed", str(2**64)], "--rht-seed"),
    (["sr-bias", "--rht-seed", "x"], "--rht-seed"),
])
def test_bad_option_values_are_refused_by_the_option_before_any_work(capsys, argv, option):
    """Not later by ``quantize`` under its own argument names, after the inputs were generated."""
    from fp4lab.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"error: argument {option}:" in err and "quantize" not in err


def test_running_out_of_memory_says_so_with_numpy_s_numbers(capsys, monkeypatch):
    """``compare --shape 100000x100000`` printed "MemoryError: the input is too deeply nested or too large"."""
    from fp4lab.analysis import distributions
    from fp4lab.cli import main

    def huge(*args, **kwargs):
        raise MemoryError("Unable to allocate 74.5 GiB for an array with shape (100000, 100000) and data type float64")

    monkeypatch.setattr(distributions, "sample", huge)
    assert main(["compare", "ufp4", "--dist", "gaussian"]) == 2
    err = capsys.readouterr().err
    assert err == "error: out of memory: Unable to allocate 74.5 GiB for an array with shape (100000, 100000) and " \
                  "data type float64\n"


@pytest.mark.parametrize("argv, line", [
    (["sr-bias", "ufp4", "--seeds", "0"], "error: sr-bias: --seeds must be at least 1, got 0\n"),
    (["sr-bias", "ufp4", "--shape", "2x3x16"], "error: sr-bias: --shape takes ROWSxCOLS, got 2x3x16\n"),
    (["search-grids", "--scheme", "fp16"], "error: search-grids: unknown scheme 'fp16'; use fp32, e4m3, e8m0\n"),
])
def test_analysis_commands_report_bad_values_as_every_command_does(capsys, argv, line):
    from fp4lab.cli import main

    assert main(argv) == 2
    assert capsys.readouterr().err == line


def test_verify_without_a_gpu_is_an_error_line_on_stderr(capsys, monkeypatch):
    import torch

    from fp4lab.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["verify", "--device", "cuda", "--formats", "ufp4"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "error: verify --device cuda: no CUDA GPU available (use --device interpreter)\n"


BARE = {"ValueError", "KeyError", "LookupError", "RuntimeError", "IndexError", "Exception"}


def _bare_raises() -> list[str]:
    """``file:line`` of every ``raise ValueError(...)``-like statement in fp4lab outside pydantic validators
    (where pydantic turns a ValueError into a ValidationError and the loader into a SpecError), leaving out the
    ``KeyError`` of a mapping's ``__getitem__`` (the protocol: ``.get`` relies on it)."""
    import ast
    from pathlib import Path

    root = Path(fp4lab.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        def visit(node, allowed):
            for child in ast.iter_child_nodes(node):
                inside = allowed
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    decorators = [d.func if isinstance(d, ast.Call) else d for d in child.decorator_list]
                    names = {getattr(d, "attr", None) or getattr(d, "id", None) for d in decorators}
                    if names & {"field_validator", "model_validator"}:
                        inside = allowed | BARE
                    elif child.name == "__getitem__":
                        inside = allowed | {"KeyError"}
                if isinstance(child, ast.Raise) and isinstance(child.exc, ast.Call) \
                        and getattr(child.exc.func, "id", None) in BARE - inside:
                    found.append(f"{path.relative_to(root.parent)}:{child.lineno}")
                visit(child, inside)
        visit(ast.parse(path.read_text()), frozenset())
    return found


def test_every_error_is_an_fp4lab_error():
    assert _bare_raises() == []


@pytest.mark.parametrize("call", [
    lambda: fp4lab.quantize(np.zeros(32, F32), "mxfp4", rounding="nearest"),
    lambda: fp4lab.register(QuantFormat(name="mxfp4", element="e2m1")),
    lambda: __import__("fp4lab.analysis.distributions", fromlist=["parse"]).parse("gausian"),
    lambda: __import__("fp4lab.analysis.compare", fromlist=["run_compare"]).run_compare(
        __import__("fp4lab.analysis.compare", fromlist=["CompareConfig"]).CompareConfig(
            formats=["ufp4"], inputs=["gaussian"], rht=[8], shape=(4, 32))),
    lambda: fp4lab.get_hw("hopper-sm90").kind("nope"),
])
def test_user_errors_are_fp4lab_errors(call):
    with pytest.raises(Fp4labError) as info:
        call()
    assert "\n" not in str(info.value)
