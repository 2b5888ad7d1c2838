"""The default study: its plan file and the recipe files it needs beyond the built-ins.

``write_study(folder)`` writes ``folder/plan.toml`` and ``folder/recipes/*.toml``; run folders go to
``folder/runs``. Edit the plan (steps, batch, seeds) before the first run: a run's settings are fixed once it has
started (``fp4lab.study.train``).
"""

from __future__ import annotations

from pathlib import Path

from fp4lab.errors import InputError

PLAN = """\
# Pretraining study of the 4-bit recipes (docs/study.md). Paths are relative to this file's folder.
out = "runs"

[train]                      # fields of fp4lab.study.train.TrainConfig shared by every run
batch = 32                   # sequences of 512 bytes: 16384 tokens per step
lr = 2e-3
warmup = 100
eval_every = 100
eval_tokens = 131072
diag_every = 500             # alpha per layer, operand and GEMM
ckpt_every = 250
keep_checkpoint = false      # delete the checkpoint once a run is done (only the logs are needed)

[sizes.small]                # 10.8M parameters (fp4lab.study.model.SIZES)
steps = 2000
[sizes.middle]               # 41.2M
steps = 2000
[sizes.large]                # 113.7M
steps = 2000
lr = 1e-3

[[runs]]                     # the main study: six recipes, three sizes, three paired seeds
sizes = ["small", "middle", "large"]
recipes = ["bf16", "e2m1-ref", "ufp4", "nvfp4", "mxfp4", "recipes/ufp4-e4m3.toml"]
seeds = [0, 1, 2]

[[runs]]                     # ablations of UFP4 at one size: RHT scope (none / WGRAD / all = ufp4), SR scope
sizes = ["middle"]
recipes = ["recipes/ufp4-rht-none.toml", "recipes/ufp4-rht-wgrad.toml", "recipes/ufp4-sr-all.toml"]
seeds = [0, 1, 2]

[[runs]]                     # operand captures for fp4lab compare: seed 0 of the main recipes, middle size
sizes = ["middle"]
recipes = ["bf16", "e2m1-ref", "ufp4"]
seeds = [0]
train = { capture_steps = [1, 1000, 2000] }
"""

_UFP4 = """rht_size = 16
rht_seed = 0
rht_signs = "fixed"
sr_bits = 16
gemm_dtype = "bf16"
high_precision = []
"""

RECIPES: dict[str, str] = {
    "ufp4-e4m3": 'name = "ufp4-e4m3"\ndescription = "UFP4 with two-level scales: E1M2 grid, 1x16 UE4M3 block scales '
                 'and an FP32 tensor scale, RHT-16 on all GEMMs, SR on dY."\nformat = "ufp4-e4m3"\n'
                 'rht = ["fprop", "dgrad", "wgrad"]\nsr = ["dy"]\n' + _UFP4,
    "ufp4-rht-none": 'name = "ufp4-rht-none"\ndescription = "UFP4 without the RHT (SR on dY)."\nformat = "ufp4"\n'
                     'rht = []\nsr = ["dy"]\n' + _UFP4,
    "ufp4-rht-wgrad": 'name = "ufp4-rht-wgrad"\ndescription = "UFP4 with RHT-16 on WGRAD only (SR on dY)."\n'
                      'format = "ufp4"\nrht = ["wgrad"]\nsr = ["dy"]\n' + _UFP4,
    "ufp4-sr-all": 'name = "ufp4-sr-all"\ndescription = "UFP4, RHT-16 on all GEMMs, SR on X, W and dY."\n'
                   'format = "ufp4"\nrht = ["fprop", "dgrad", "wgrad"]\nsr = ["x", "w", "dy"]\n' + _UFP4,
}


def write_study(folder: str | Path, force: bool = False) -> list[Path]:
    """Write the default plan and its recipe files into ``folder``; returns the paths written."""
    base = Path(folder)
    plan = base / "plan.toml"
    if plan.exists() and not force:
        raise InputError(f"init: {plan} exists; edit it, or pass force to overwrite the plan and recipes")
    (base / "recipes").mkdir(parents=True, exist_ok=True)
    written = [plan]
    plan.write_text(PLAN)
    for name, text in RECIPES.items():
        path = base / "recipes" / f"{name}.toml"
        path.write_text(f"# {name}: written by fp4lab.study.defaults. Field reference: docs/recipes.md.\n{text}")
        written.append(path)
    return written
