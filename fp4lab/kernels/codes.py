"""Named ``tl.constexpr`` constants for kernel code, so that a kernel compares a record field with a name
(``SCALE.KIND == KIND_BF16``), never with a bare integer.

Each constant is the ``code`` of an enum member: the plan's choices (``fp4lab.numerics.plan``, the numbering the
numba twin uses too) and the kernel-only ones (``params.ElementDecode``, ``params.InputKind``). The positions
of the runtime tables in the ``etab`` tuple come from ``params.ElementParams.kernel_args``.
"""

from __future__ import annotations

import triton.language as tl

from fp4lab.kernels.params import ElementDecode, InputKind
from fp4lab.numerics.plan import Encoder, ExponentRule, Overflow, ScaleChoice, ScaleKind, ScaleRounding


def _code(member: Encoder | ExponentRule | Overflow | ScaleChoice | ScaleKind | ScaleRounding | ElementDecode
          | InputKind) -> tl.constexpr:
    return tl.constexpr(member.code)


# ELEM.ENCODER: evaluation of count(t >= thresholds)
ENCODER_SIGN_MAGNITUDE = _code(Encoder.SIGN_MAGNITUDE)
ENCODER_MAGNITUDE = _code(Encoder.MAGNITUDE)
ENCODER_SIGNED = _code(Encoder.SIGNED)

# ELEM.OVERFLOW: magnitudes at or above the overflow threshold
OVERFLOW_SATURATE = _code(Overflow.SATURATE)
OVERFLOW_NAN = _code(Overflow.NAN)
OVERFLOW_INF = _code(Overflow.INF)

# SCALE.CHOICE, SCALE.EXP_RULE, SCALE.ROUNDING, SCALE.KIND
CHOICE_NONE = _code(ScaleChoice.NONE)
CHOICE_AMAX = _code(ScaleChoice.AMAX)
CHOICE_EXPONENT = _code(ScaleChoice.EXPONENT)
RULE_FLOOR = _code(ExponentRule.FLOOR)
RULE_CEIL = _code(ExponentRule.CEIL)
RULE_EVEN = _code(ExponentRule.EVEN)
ROUND_RTNE = _code(ScaleRounding.RTNE)
ROUND_CEIL = _code(ScaleRounding.CEIL)
ROUND_FLOOR = _code(ScaleRounding.FLOOR)
KIND_POW2 = _code(ScaleKind.POW2)
KIND_FLOAT_TABLE = _code(ScaleKind.FLOAT_TABLE)
KIND_FP32 = _code(ScaleKind.FP32)
KIND_BF16 = _code(ScaleKind.BF16)
KIND_FLOAT_BITS = _code(ScaleKind.FLOAT_BITS)

# DEC.KIND
DECODE_FLOAT = _code(ElementDecode.FLOAT)
DECODE_INT = _code(ElementDecode.INT)
DECODE_TABLE = _code(ElementDecode.TABLE)

# IN_KIND
INPUT_F32 = _code(InputKind.F32)
INPUT_BF16 = _code(InputKind.BF16)
INPUT_F16 = _code(InputKind.F16)

# positions in ``etab`` (params.ElementParams.kernel_args) read by index
ETAB_LEVELS = tl.constexpr(3)
ETAB_VALUES = tl.constexpr(6)
