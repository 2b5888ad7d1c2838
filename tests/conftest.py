"""Test-suite setup: Triton runs in its CPU interpreter, hypothesis uses the "ci" profile by default, and the
heavy tests carry markers so that README's quick command can leave them out.

"ci" is derandomized (the same examples on every run, so CI cannot fail on a draw it never saw before);
``HYPOTHESIS_PROFILE=explore`` searches fresh random examples, ten times as many, for development.

Markers (registered in pyproject.toml) are assigned here from ``MARKS``: a pattern matched (fnmatch) against the
test id relative to tests/ without its parameters (``test_file.py::test_name``) -> the markers it gets. The
assignment stays true as tests are added: a test without the ``interpreter`` marker that launches a Triton kernel
in the interpreter fails, and so does one without the ``subprocess`` marker that starts a Python interpreter,
torchrun, a shell or the fp4lab command (``_note``; compilers that libraries start, such as ninja, do not count).
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Must happen before anything imports triton: @triton.jit reads it at decoration time.
os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", deadline=None, max_examples=100, derandomize=True, print_blob=True)
settings.register_profile("explore", deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HEAVY = ("interpreter", "subprocess", "distributed", "slow")  # README's quick command deselects these
INTERP, SUB, SLOW = ("interpreter",), ("subprocess",), ("slow",)

# test id (file.py::name, parameters left out) -> markers; kept true by the guards below; "slow": several seconds on
# 2 cores for another reason (measured with `pytest --durations`)
MARKS: dict[str, tuple[str, ...]] = {
    # torchrun: two CPU ranks per test
    "test_distributed.py::*": ("distributed", "subprocess"),
    # a fresh Python interpreter (the fp4lab command, README's examples, import checks)
    "test_compile.py::test_the_recipes_guide_example_runs": SUB,
    "test_cli.py::test_python_dash_m_runs_the_command": SUB,
    "test_cpu_gemm.py::test_gemm_reference_needs_no_triton": SUB,
    "test_first_run.py::test_compare_*": SUB,
    "test_hostile_inputs.py::test_default_cache_is_private_and_never_in_tree": SUB,
    "test_hostile_inputs.py::test_planted_pickle_in_a_writable_cache_dir_never_runs": SUB,
    "test_hostile_inputs.py::test_copies_of_the_sources_share_one_cache_entry": SUB,
    "test_interop.py::test_interop_imports_no_foreign_library": SUB,
    "test_interop.py::test_first_torchao_use_prints_nothing": SUB,
    "test_package_graph.py::test_numerics_and_the_gpu_quantize_path_import_no_numba": SUB + INTERP,
    "test_quantize_options.py::test_import_fp4lab_stays_light": SUB,
    "test_readme.py::test_fp4lab_command_exits_0": SUB,
    "test_readme.py::test_python_blocks_run": SUB,
    "test_study.py::test_study_procs_runs_shards_and_packs": SUB,
    "test_testing_inputs.py::test_inputs_import_without_hypothesis": SUB,
    # torch.compile: Inductor compiles C++ in worker processes
    "test_compile.py::test_a_layer_used_twice_is_converted_everywhere_and_runs": SUB + SLOW,
    "test_compile.py::test_activation_checkpointing_under_torch_compile": SUB + SLOW,
    "test_compile.py::test_blocks_compiled_one_by_one_share_one_graph": SUB + SLOW,
    "test_compile.py::test_compiled_steps_have_no_graph_break_and_equal_eager_bit_for_bit": SUB + SLOW,
    "test_compile.py::test_other_compile_modes_equal_eager_bit_for_bit": SUB + SLOW,
    "test_compile.py::test_piece_ops_pass_opcheck_and_fake_quantize_compiles": SUB + SLOW,
    "test_compile.py::test_quantize_model_of_a_compiled_model_names_layers_as_the_model_does": SUB + SLOW,
    "test_compile.py::test_input_errors_under_torch_compile": SUB + SLOW,
    "test_compile.py::test_recipe_file_compiles_like_its_builtin": SUB + SLOW,
    "test_hw_gemm.py::test_compiled_steps_equal_eager_bit_for_bit": SUB + SLOW,
    # optional dependencies hidden from a fresh interpreter; torch's thread settings in one
    "test_optional_deps.py::test_compare_plot_without_matplotlib_stops_before_the_run": SUB,
    "test_optional_deps.py::test_pt_file_without_torch_names_the_torch_extra": SUB,
    "test_optional_deps.py::test_verify_without_torch_or_triton_names_the_gpu_extra": SUB,
    "test_threads.py::test_torch_threads_unchanged": SUB,
    # ptxas of the MMA kernels for sm_90 (offline)
    "test_mma_triton.py::test_kernels_compile_for_sm90_without_register_spills": SUB,
    # Triton kernels in the CPU interpreter
    "test_cpu_gemm.py::test_exact_matches_the_triton_kernel_in_the_interpreter": INTERP,
    "test_fakequant.py::test_bf16_output_is_exact_without_the_tensor_scale": INTERP,
    "test_fakequant.py::test_bf16_output_rounds_fp32_scaled_formats": INTERP,
    "test_fakequant.py::test_explicit_tiles_with_partial_edge_tiles": INTERP,
    "test_fakequant.py::test_fallback_2d_tiles_along_m": INTERP,
    "test_fakequant.py::test_fallback_odd_k_and_width_one_blocks": INTERP,
    "test_fakequant.py::test_fused_matches_reference_all_formats": INTERP,
    "test_fakequant.py::test_one_level_formats_have_no_tensor_scale": INTERP,
    "test_fakequant.py::test_sr_every_width_both_blockings": INTERP,
    "test_fakequant.py::test_sr_rows_not_a_multiple_of_one_philox_call": INTERP,
    "test_fakequant.py::test_tensor_scales_per_rotated_view": INTERP,
    "test_floats.py::test_fnuz_grid_rounds_like_ml_dtypes": INTERP,
    "test_fp8_gemm.py::test_every_e4m3_value_at_extreme_offsets_fits": INTERP,
    "test_fp8_gemm.py::test_fp8_gemm_takes_the_bf16_path_for_unfit_rows_and_columns": INTERP,
    "test_fp8_gemm.py::test_quantlinear_fp8_device_path_in_the_interpreter": INTERP,
    "test_fp8_gemm.py::test_triton_kernel_matches_reference": INTERP,
    "test_fp8_gemm.py::test_unfit_kernel_leaves_fit_tiles_alone_and_handles_strides": INTERP,
    "test_gfloat_diff.py::test_directed_modes_on_every_backend": INTERP,
    "test_hw_gemm.py::test_codes_and_scales_dequantize_to_the_fake_quant_bits": INTERP,
    "test_hw_gemm.py::test_three_gemms_equal_the_cpu_model_on_reference_operands": INTERP,
    "test_kernels.py::test_dequantize_fp32_bf16_and_inverse_rht": INTERP,
    "test_kernels.py::test_dequantize_float_grids_with_negative_bias": INTERP,
    "test_kernels.py::test_float_scales_with_a_negative_bias_decode_by_table": INTERP,
    "test_kernels.py::test_dequantize_strided_codes_and_wrong_scale_shape": INTERP,
    "test_kernels.py::test_division_at_rounding_boundaries": INTERP,
    "test_kernels.py::test_division_by_reciprocal_falls_back_near_boundaries": INTERP,
    "test_kernels.py::test_division_by_reciprocal_is_exact": INTERP,
    "test_kernels.py::test_e4m3_block_scales_at_ties_and_subnormal_amaxes": INTERP,
    "test_kernels.py::test_fma_rn_rounds_once": INTERP,
    "test_kernels.py::test_gemm_errors": INTERP,
    "test_kernels.py::test_gemm_exact_matches_reference": INTERP,
    "test_kernels.py::test_input_dtypes_and_middle_axis": INTERP,
    "test_kernels.py::test_nan_elements_of_ignore_blocks_take_the_nan_code": INTERP,
    "test_kernels.py::test_other_rounding_modes": INTERP,
    "test_kernels.py::test_packed_output_matches_pack_nibbles": INTERP,
    "test_kernels.py::test_quantize_bf16_words_path_all_formats": INTERP,
    "test_kernels.py::test_quantize_matches_reference_all_formats": INTERP,
    "test_kernels.py::test_rht_matches_reference": INTERP,
    "test_kernels.py::test_scale_overflow_saturates_and_zero_times_infinite_reciprocal": INTERP,
    "test_kernels.py::test_spec_file_grid_runs_without_new_kernel_code": INTERP,
    "test_kernels.py::test_swizzle_128x4_layout": INTERP,
    "test_kernels.py::test_run_cases_logs_each_variant_and_keeps_the_case_order": INTERP,
    "test_kernels.py::test_verify_cli_interpreter": INTERP,
    "test_kernels.py::test_verify_compare_reports_first_mismatch": INTERP,
    "test_kernels.py::test_verify_fakequant_case_reports_first_mismatch": INTERP,
    "test_library_semantics.py::test_new_fields_on_the_triton_kernels": INTERP,
    "test_mma_triton.py::test_emulate_gemm_runs_quantized_torch_operands_on_the_kernels": INTERP,
    "test_mma_triton.py::test_hw_verify_device_interpreter_reports_every_kind_of_a_spec": INTERP,
    "test_mma_triton.py::test_kernels_equal_cpu_model_on_every_format_pair_and_input_style": INTERP,
    "test_mma_triton.py::test_kernels_with_a_parameter_off_by_one_disagree": INTERP,
    "test_mma_triton.py::test_scale_codes_and_scale_values_give_the_same_bits": INTERP,
    "test_mma_triton.py::test_user_spec_parameters_group_fused_len_frac_bits_e_zero_rounding": INTERP,
    "test_mmasim_diff.py::test_triton_kernels_bit_exact_against_mmasim": INTERP,
    "test_philox.py::test_matches_triton_randint4x_int32_offsets": INTERP,
    "test_philox.py::test_matches_triton_randint4x_int64_offsets": INTERP,
    "test_philox.py::test_matches_triton_randint4x_uint64_offsets": INTERP,
    "test_range_edges.py::test_decoded_cap_keeps_the_sign_of_zero": INTERP,
    "test_range_edges.py::test_directed_rounding_of_underflowing_quotients": INTERP,
    "test_range_edges.py::test_triton_matches_reference_at_range_edges": INTERP,
    "test_range_edges.py::test_triton_quantize_and_fakequant_at_range_edges": INTERP,
    "test_recipes.py::test_device_keys_equal_the_host_formula": INTERP,
    "test_recipes.py::test_triton_path_equals_emulator_path": INTERP,
    "test_sr_bits.py::test_sr_bits_24_is_the_default": INTERP,
    "test_sr_bits.py::test_triton_quantize_sr_encoder_edges": INTERP,
    "test_sr_bits.py::test_triton_quantize_sr_every_width": INTERP,
    "test_sr_bits.py::test_triton_quantize_sr_general_random_path": INTERP,
}

_TESTS = Path(__file__).resolve().parent
_current: list[pytest.Item] = []
_violations: list[str] = []


def markers_for(test_id: str) -> set[str]:
    """The markers ``MARKS`` gives the test ``test_id`` (``file.py::name`` or ``file.py::name[params]``)."""
    base = test_id.split("[", 1)[0]
    return {m for pattern, marks in MARKS.items() if fnmatch.fnmatchcase(base, pattern) for m in marks}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        test_id = f"{Path(item.path).relative_to(_TESTS).as_posix()}::{item.name}"
        for name in sorted(markers_for(test_id)):
            item.add_marker(name)


def _note(marker: str, what: str) -> None:
    """Record that the running test does ``what`` without carrying ``marker`` (it fails when its phase ends: raising
    here could be swallowed by the code under test)."""
    if _current and _current[-1].get_closest_marker(marker) is None:
        _violations.append(f"{_current[-1].nodeid} {what} but has no '{marker}' marker: add it to MARKS in "
                           "tests/conftest.py (README's quick command must leave it out)")


def _install_guards() -> None:
    popen_init = subprocess.Popen.__init__

    def guarded_popen(self, args, *rest, **kwargs):  # type: ignore[no-untyped-def]
        first = os.fsdecode(args if isinstance(args, (str, bytes, os.PathLike)) else args[0]).split()
        prog = Path(first[0]).name if first else ""
        if prog in ("bash", "sh") or prog.startswith(("python", "torchrun", "fp4lab")) or \
                prog == Path(sys.executable).name:
            _note("subprocess", f"starts {prog}")
        popen_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = guarded_popen  # type: ignore[method-assign]
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    launch = interpreter.GridExecutor.__call__

    def guarded_launch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        _note("interpreter", "launches a Triton kernel in the interpreter")
        return launch(self, *args, **kwargs)

    interpreter.GridExecutor.__call__ = guarded_launch  # type: ignore[method-assign]


_install_guards()


def _guarded(item: pytest.Item):  # type: ignore[no-untyped-def]
    """Setup and call of ``item``: fail it when ``_note`` recorded a launch its markers do not allow."""
    _current.append(item)
    try:
        result = yield
    finally:
        _current.pop()
        found = list(dict.fromkeys(_violations))
        _violations.clear()
    if found:
        raise AssertionError("; ".join(found))
    return result


pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_guarded)
pytest_runtest_call = pytest.hookimpl(wrapper=True)(_guarded)
