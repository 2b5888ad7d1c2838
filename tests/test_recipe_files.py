"""Recipes as data: built-in TOML files, user files, one-line errors, lookup, the ``fp4lab recipes`` CLI, docs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fp4lab.cli import main
from fp4lab.errors import SpecError, UnknownRecipeError
from fp4lab.recipes.config import BUILTIN_RECIPES, Recipe, get_recipe, list_recipes, load_recipe, recipe_to_toml

BUILTIN_DIR = Path(__file__).parents[1] / "fp4lab" / "recipes" / "builtin"
DOC = Path(__file__).parents[1] / "docs" / "recipes.md"
OK = 'name = "mine"\nformat = "ufp4"\n'

BAD = {
    "bad_toml": ('name = "x"\nformat = "ufp4\n', "not valid TOML"),
    "unknown_field": (OK + "colour = 1\n", "unknown field 'colour'"),
    "unknown_format": ('name = "x"\nformat = "no-such-format"\n', "format: unknown format 'no-such-format'"),
    "unknown_weight_format": (OK + 'weight_format = "nvfp5"\n', "weight_format: unknown format 'nvfp5'"),
    "sr_bits": (OK + "sr_bits = 7\n", "sr_bits: Input should be 4, 8, 16 or 24"),
    "rht_size": (OK + "rht_size = 24\n", "rht_size: Input should be 16, 32, 64, 128 or 256"),
    "wrong_type": (OK + 'rht = "wgrad"\n', "rht: Input should be a valid list"),
    "gemm_dtype": (OK + 'gemm_dtype = "fp16"\n', "gemm_dtype: Input should be 'bf16', 'fp32', 'fp8' or 'fp8-fast'"),
    "empty_pattern": (OK + 'high_precision = ["lm_head", ""]\n', "high_precision.1: String should have at least"),
    "sr_without_format": ('name = "x"\n', "format: required when sr is set"),
    "rht_without_format": ('name = "x"\nsr = []\nrht = ["wgrad"]\n', "format: required when rht is set"),
}


@pytest.mark.parametrize("name", list_recipes())
def test_builtin_file_loads_and_round_trips(name, tmp_path):
    recipe = load_recipe(BUILTIN_DIR / f"{name}.toml")
    assert recipe == BUILTIN_RECIPES[name] == get_recipe(name)
    path = tmp_path / f"{name}.toml"
    path.write_text(recipe_to_toml(recipe))
    assert load_recipe(path) == recipe


def test_builtin_registry_contents():
    assert list_recipes() == ["bf16", "e2m1-ref", "ufp4", "nvfp4", "mxfp4", "mxfp4-fp8"] == list(BUILTIN_RECIPES)
    assert sorted(p.stem for p in BUILTIN_DIR.glob("*.toml")) == sorted(list_recipes())
    assert BUILTIN_RECIPES["bf16"].sr_bits == 24 and BUILTIN_RECIPES["bf16"].format is None
    for name in list_recipes()[1:]:
        r = BUILTIN_RECIPES[name]
        gemm = "fp8" if name == "mxfp4-fp8" else "bf16"
        assert (r.sr_bits, r.gemm_dtype, r.rht_signs, r.high_precision, r.sr) == (16, gemm, "fixed", [], ["dy"])
    assert BUILTIN_RECIPES["mxfp4"].rht_size == 32 and BUILTIN_RECIPES["ufp4"].rht == ["fprop", "dgrad", "wgrad"]
    assert [BUILTIN_RECIPES["nvfp4"].format_of(op) for op in ("x", "w", "dy")] == ["nvfp4", "nvfp4-2d", "nvfp4"]


def test_user_recipe_file_with_every_field_round_trips(tmp_path):
    recipe = Recipe(name="all", description="d", format="mxfp4", grad_format="mxfp4-rceil", rht=["dgrad"],
                    rht_size=128, rht_seed=2**64 - 1, rht_signs="per_layer", sr=["x", "dy"], sr_bits=4,
                    gemm_dtype="fp32", high_precision=["lm_head", "layers.[01].*"])
    for suffix, text in ((".toml", recipe_to_toml(recipe)), (".json", recipe.model_dump_json())):
        path = tmp_path / f"all{suffix}"
        path.write_text(text)
        assert get_recipe(path) == get_recipe(str(path)) == recipe
    assert get_recipe(recipe) is recipe


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_recipe_file_is_a_one_line_spec_error(case, tmp_path):
    text, expected = BAD[case]
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        get_recipe(str(path))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}: ") and expected in msg


def test_unknown_recipe_name_suggests_the_closest():
    with pytest.raises(UnknownRecipeError) as info:
        get_recipe("ufp")
    msg = str(info.value)
    assert isinstance(info.value, LookupError) and isinstance(info.value, ValueError)
    assert "\n" not in msg and msg.startswith("unknown recipe 'ufp'") and "did you mean 'ufp4'" in msg
    assert msg.endswith("built-in recipes: bf16, e2m1-ref, ufp4, nvfp4, mxfp4, mxfp4-fp8")
    with pytest.raises(UnknownRecipeError) as info:
        get_recipe("zzzz")
    assert "did you mean" not in str(info.value)


def test_docs_example_recipe_loads(tmp_path):
    blocks = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1
    path = tmp_path / "example.toml"
    path.write_text(blocks[0])
    recipe = get_recipe(path)
    assert (recipe.format, recipe.rht_size, recipe.rht_signs, recipe.high_precision) == (
        "mxfp4", 32, "per_layer", ["lm_head", "layers.0.*"])


def test_example_recipe_files_load():
    """The recipe files under examples/recipes stay valid: each loads and differs from its built-in namesake only
    where its comment says (the fast-accumulation variant of mxfp4-fp8: gemm_dtype)."""
    files = sorted((Path(__file__).resolve().parents[1] / "examples" / "recipes").glob("*.toml"))
    assert files
    fast = get_recipe(next(f for f in files if f.stem == "mxfp4-fp8-fast"))
    base = get_recipe("mxfp4-fp8")
    differ = {k for k, v in fast.model_dump().items() if v != base.model_dump()[k]}
    assert differ == {"name", "description", "gemm_dtype"} and fast.gemm_dtype == "fp8-fast"
    for f in files:
        assert get_recipe(f).name == f.stem


@pytest.mark.parametrize("name", list_recipes())
def test_docs_builtin_table_matches_the_files(name):
    r = BUILTIN_RECIPES[name]
    x, w, dy = (r.format_of(op) or "bf16" for op in ("x", "w", "dy"))
    rht = (", ".join(r.rht), str(r.rht_size)) if r.rht else ("-", "-")
    sr = (", ".join(r.sr), str(r.sr_bits)) if r.sr else ("-", "-")
    row = " | ".join((f"`{name}`", x, w, dy, *rht, *sr, r.gemm_dtype))
    assert f"| {row} |\n" in DOC.read_text()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_recipes_table_fits_80_columns(capsys):
    code, out, err = run(capsys, "recipes")
    assert code == 0 and err == ""
    assert max(map(len, out.splitlines())) <= 80 and "…" not in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in BUILTIN_RECIPES}
    assert list(lines) == list_recipes()
    assert "nvfp4 / nvfp4-2d / nvfp4" in lines["nvfp4"] and "wgrad (32)" in lines["mxfp4"]
    assert "all (16)" in lines["ufp4"] and "e2m1-b16-fp32" in lines["e2m1-ref"]


def test_cli_recipes_json(capsys):
    code, out, _ = run(capsys, "recipes", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["name"] for r in rows] == list_recipes()
    for row in rows:
        formats = row.pop("operand_formats")
        recipe = Recipe.model_validate(row)
        assert recipe == BUILTIN_RECIPES[row["name"]]
        assert formats == {op: recipe.format_of(op) for op in ("x", "w", "dy")}


@pytest.mark.parametrize("argv", [("recipes", "show", "ufp4", "--json"), ("recipes", "--json", "show", "ufp4")])
def test_cli_show_json(capsys, argv):
    code, out, _ = run(capsys, *argv)
    rep = json.loads(out)
    assert code == 0 and rep["operand_formats"] == {"x": "ufp4", "w": "ufp4", "dy": "ufp4"}
    del rep["operand_formats"]
    assert Recipe.model_validate(rep) == BUILTIN_RECIPES["ufp4"]


def test_cli_show_table_lists_every_field(capsys, tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(OK + 'high_precision = ["[ab]*"]\n')
    code, out, _ = run(capsys, "recipes", "show", str(path))
    assert code == 0 and "[ab]*" in out  # rich markup is not interpreted in values
    for field in Recipe.model_fields:
        assert field in out


def test_cli_show_bad_file_is_one_line_error(capsys, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(OK + "sr_bits = 7\n")
    code, out, err = run(capsys, "recipes", "show", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: sr_bits:")
    code, out, err = run(capsys, "recipes", "show", "ufp")
    assert code == 2 and out == "" and err.count("\n") == 1 and "did you mean 'ufp4'" in err


def test_format_file_named_in_a_recipe_resolves_from_the_recipe_folder(tmp_path, monkeypatch):
    """format = "grid.toml" in recipes/r.toml names recipes/grid.toml from any working directory, and the recipe
    keeps it as an absolute path (what a study records); registered names and absolute paths stay as written."""
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "grid.toml").write_text('name = "grid"\nelement = "e1m2"\nblock = 16\nscale = "fp32"\n'
                                      '[scale_rule]\nmethod = "amax"\n')
    (folder / "r.toml").write_text('name = "r"\nformat = "grid.toml"\nweight_format = "mxfp4"\n')
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = get_recipe(str(folder / "r.toml"))
    assert r.format == str((folder / "grid.toml").resolve()) and r.weight_format == "mxfp4"
    assert Path(r.format_of("x")).is_absolute()
    assert load_recipe(Path("..") / "recipes" / "r.toml").format == r.format
    (folder / "abs.toml").write_text(f'name = "a"\nformat = "{folder / "grid.toml"}"\n')
    assert load_recipe(folder / "abs.toml").format == str(folder / "grid.toml")
