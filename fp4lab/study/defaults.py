"""The default study (docs/study.md, "Study design"): its plan files and the recipe files they need beyond the
built-ins.

``write_study(folder)`` writes ``folder/pilot.toml`` (the pilot: throughput and the paired standard deviation that
sets the number of seeds), ``folder/lr_sweep.toml`` (the learning rate per size, on bf16), ``folder/plan.toml``
(the study: the 2x2 factorial of grid x RHT scope, the positive and negative controls, the repeat check) and
``folder/recipes/*.toml`` (the four factorial cells and UFP4 with UE4M3 scales). It writes nothing if any of those
files exists, unless ``force``; files are written atomically and a symlink in their place is replaced, not
followed. Edit a plan (steps, seeds, lr) before its first run: a run's settings are fixed once it has started
(``fp4lab.study.train``).
"""

from __future__ import annotations

from pathlib import Path

from fp4lab.errors import OutputError
from fp4lab.study.logs import write_text

_COMMON = """\
corpus = "python-packages"   # every *.py under this interpreter's site-packages (docs/study.md, "Corpus")

[train]                      # fields of fp4lab.study.train.TrainConfig shared by every run
batch = 32                   # sequences of 512 bytes: 16384 tokens per step
warmup = 200
eval_every = 50
eval_tokens = 65536
diag_every = 0               # no alpha diagnostics (they cost time; the operand mechanism is measured elsewhere)
ckpt_every = 500
keep_checkpoint = false
deterministic = true         # every run; the repeat group checks that a run repeats bit for bit
"""
_S2M = "model = { d_model = 192, layers = 4, heads = 6, ffn = 512, seq_len = 512 }"
# the study's length: 30 tokens per parameter, so that a 4-bit run finishes within one 10-minute slice beside 12
# other runs (the pilot on the H200: 131-170k tokens/s per 4-bit run, 13 processes)
_STUDY_SIZES = f"""
[sizes.s2m]                  # 1.87M parameters; 3420 steps = 56.0M tokens = 30 tokens per parameter
{_S2M}
steps = 3420
"""
# the lr of the study's size, from lr_sweep.toml (bf16, seeds 0-2: mean final-window training loss 0.8430, 0.8324,
# 0.8311 and 0.8544 at lr 1e-3, 2e-3, 4e-3 and 8e-3; docs/results/study/lr-sweep/)
_STUDY_LR = "lr = 4e-3                    # from lr_sweep.toml\n"

PILOT = """\
# Pilot of the pretraining study (docs/study.md, "Study design"): throughput, the repeat check, and the paired
# standard deviation of the negative control (bf16 vs bf16 with another data order) and of ufp4 vs e2m1-ref,
# which set the number of seeds of plan.toml. Paths are relative to this file's folder.
out = "pilot-runs"
""" + _COMMON + f"""lr = 2e-3

[sizes.s2m]                  # 1.87M parameters; 1000 steps = 16.4M tokens = 8.8 tokens per parameter, sized so
{_S2M}
steps = 1000                 # that 25 runs fit one 9-minute slice on one H200 (13 processes, 2 runs each)
""" + """
[[runs]]                     # the repeat check (first, so that it starts at once): the same run again must
sizes = ["s2m"]              # give the same bits
recipes = ["ufp4"]
seeds = [0]
repeat = true

[[runs]]
sizes = ["s2m"]
recipes = ["bf16", "ufp4", "e2m1-ref"]
seeds = [0, 1, 2, 3, 4, 5]

[[runs]]                     # negative control: bf16 with another order of the same batches' distribution
sizes = ["s2m"]
recipes = ["bf16"]
label = "bf16-order1"
seeds = [0, 1, 2, 3, 4, 5]
train = { data_order = 1 }
"""

_LR_GROUPS = "".join(f"""
[[runs]]
sizes = ["s2m"]
recipes = ["bf16"]
label = "bf16-lr{tag}"
seeds = [0, 1, 2]
train = {{ lr = {lr} }}
""" for tag, lr in (("1e-3", "1e-3"), ("2e-3", "2e-3"), ("4e-3", "4e-3"), ("8e-3", "8e-3")))

LR_SWEEP = """\
# Learning-rate sweep on bf16, per size (docs/study.md, "Study design"): the lr with the lowest final-window
# training loss (mean over the three seeds) goes into plan.toml for that size and is then held fixed for every
# recipe. Steps as in plan.toml. Paths are relative to this file's folder.
out = "lr-runs"
""" + _COMMON + _STUDY_SIZES + _LR_GROUPS

_CELLS = ('recipes = ["bf16", "recipes/e2m1-rht-wgrad.toml", "recipes/e2m1-rht-all.toml", '
          '"recipes/e1m2-rht-wgrad.toml",\n           "recipes/e1m2-rht-all.toml"]')
_SEEDS_0_7 = "seeds = [0, 1, 2, 3, 4, 5, 6, 7]"

PLAN = f"""\
# The pretraining study (docs/study.md, "Study design"): 32 paired seeds of the 2x2 factorial and its bf16
# baseline; the controls and the exploratory recipe on seeds 0-7; the repeat check. Set lr from lr_sweep.toml
# before the first run. Runs go in plan order (group, then seed), so each slice adds whole paired seeds. Paths are
# relative to this file's folder.
out = "runs"
{_COMMON}{_STUDY_SIZES}{_STUDY_LR}
[[runs]]                     # the repeat check (first, so that it starts at once)
sizes = ["s2m"]
recipes = ["recipes/e1m2-rht-all.toml"]
seeds = [0]
repeat = true

[[runs]]                     # confirmatory cells: the 2x2 factorial (grid x RHT scope, SR on dY in all four) and
sizes = ["s2m"]              # the bf16 baseline of every gap; seeds 0-7 (8-31 in the last group)
{_CELLS}
{_SEEDS_0_7}

[[runs]]                     # negative control: bf16 with another data order
sizes = ["s2m"]
recipes = ["bf16"]
label = "bf16-order1"
{_SEEDS_0_7}
train = {{ data_order = 1 }}

[[runs]]                     # positive controls nvfp4 and mxfp4, and exploratory (outside the corrected family):
sizes = ["s2m"]              # UFP4 with UE4M3 two-level scales
recipes = ["nvfp4", "mxfp4", "recipes/ufp4-e4m3.toml"]
{_SEEDS_0_7}

[[runs]]                     # confirmatory cells, seeds 8-31
sizes = ["s2m"]
{_CELLS}
seeds = [{", ".join(str(i) for i in range(8, 32))}]
"""

PLANS: dict[str, str] = {"pilot.toml": PILOT, "lr_sweep.toml": LR_SWEEP, "plan.toml": PLAN}

_TAIL = """rht_size = 16
rht_seed = 0
rht_signs = "fixed"
sr = ["dy"]
sr_bits = 16
gemm_dtype = "bf16"
high_precision = []
"""


def _recipe(name: str, description: str, fmt: str, rht: str) -> str:
    return f'name = "{name}"\ndescription = "{description}"\nformat = "{fmt}"\nrht = {rht}\n' + _TAIL


_ALL, _WGRAD = '["fprop", "dgrad", "wgrad"]', '["wgrad"]'
RECIPES: dict[str, str] = {
    "e2m1-rht-wgrad": _recipe("e2m1-rht-wgrad", "E2M1 grid, 1x16 FP32 scales, RHT-16 on WGRAD only, SR on dY "
                              "(the paper's E2M1 reference).", "e2m1-b16-fp32", _WGRAD),
    "e2m1-rht-all": _recipe("e2m1-rht-all", "E2M1 grid, 1x16 FP32 scales, RHT-16 on all GEMMs, SR on dY.",
                            "e2m1-b16-fp32", _ALL),
    "e1m2-rht-wgrad": _recipe("e1m2-rht-wgrad", "E1M2 grid (UFP4), 1x16 FP32 scales, RHT-16 on WGRAD only, SR on "
                              "dY.", "ufp4", _WGRAD),
    "e1m2-rht-all": _recipe("e1m2-rht-all", "E1M2 grid (UFP4), 1x16 FP32 scales, RHT-16 on all GEMMs, SR on dY "
                            "(the paper's UFP4).", "ufp4", _ALL),
    "ufp4-e4m3": _recipe("ufp4-e4m3", "UFP4 with two-level scales: E1M2 grid, 1x16 UE4M3 block scales and an FP32 "
                         "tensor scale, RHT-16 on all GEMMs, SR on dY.", "ufp4-e4m3", _ALL),
}


def study_files() -> dict[str, str]:
    """{relative path: text} of every file ``write_study`` writes."""
    files = dict(PLANS)
    for name, text in RECIPES.items():
        files[f"recipes/{name}.toml"] = (f"# {name}: written by fp4lab.study.defaults. Field reference: "
                                         f"docs/recipes.md.\n{text}")
    return files


def write_study(folder: str | Path, force: bool = False) -> list[Path]:
    """Write the default plans and their recipe files into ``folder``; returns the paths written."""
    base = Path(folder)
    files = {base / rel: text for rel, text in study_files().items()}
    there = [p for p in files if p.exists() or p.is_symlink()]
    if there and not force:
        shown = ", ".join(str(p) for p in there[:3]) + (f" and {len(there) - 3} more" if len(there) > 3 else "")
        raise OutputError(f"init: {shown} exist(s); edit them, or pass --force to overwrite the plans and recipes")
    try:
        (base / "recipes").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"init: cannot create {base / 'recipes'}: {exc.strerror}") from None
    for path, text in files.items():
        if path.is_dir():
            raise OutputError(f"init: {path} is a folder")
        write_text(path, text)
    return list(files)
