"""Bit casts between float32 and uint32 for numba code (no arithmetic: an LLVM ``bitcast``, NaN payloads kept)."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def f32_to_u32(typingctx, x):
    """uint32 bit pattern of a float32 scalar."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def u32_to_f32(typingctx, x):
    """float32 whose bit pattern is the low 32 bits of the integer scalar ``x``."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        v = args[0]
        if x.bitwidth > 32:
            v = builder.trunc(v, ir.IntType(32))
        elif x.bitwidth < 32:
            v = builder.zext(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())

    return types.float32(x), codegen
