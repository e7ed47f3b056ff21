"""A software prefetch for numba kernels that update rows scattered over large tables.

A row update in LazyAdam is a long loop body (weight and both moments, ~50 wide), so the CPU's
out-of-order window holds the cache misses of about one row at a time. Asking for the rows a few
updates ahead overlaps those misses (figures on ML-25M-shaped batches: docs/performance.md).

numba's disk cache of a kernel is keyed on the kernel's own source file only: after editing this
file, delete recsys/train/__pycache__/*.nbi and *.nbc, or the old compiled kernel is loaded.
"""

from collections.abc import Callable
from typing import Any, cast

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_CACHE_LINE = 64


@intrinsic
def _prefetch_row(typingctx: Any, table: types.Array, row: types.Integer) -> Any:
    """Hint the CPU to fetch, for writing, every cache line of `table[row]` (a row of a 2-d, or an
    entry of a 1-d, C-contiguous array). Only a hint: nothing is read or written, and it cannot
    fault."""
    if not isinstance(table, types.Array) or table.ndim not in (1, 2) or table.layout != "C":
        return None
    if not isinstance(row, types.Integer):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> Any:
        intp = context.get_value_type(types.intp)
        array = context.make_array(signature.args[0])(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, array.shape)
        row_index = context.cast(builder, args[1], signature.args[1], types.intp)
        start = cgutils.get_item_pointer2(
            context,
            builder,
            data=array.data,
            shape=shape,
            strides=cgutils.unpack_tuple(builder, array.strides),
            layout="C",
            inds=[row_index] + [intp(0)] * (table.ndim - 1),
        )
        byte_pointer = ir.IntType(8).as_pointer()
        start = builder.bitcast(start, byte_pointer)
        # From the shape, not the strides: numpy may give a length-1 dimension any stride.
        row_bytes = intp(context.get_abi_sizeof(context.get_data_type(table.dtype)))
        if table.ndim == 2:
            row_bytes = builder.mul(row_bytes, shape[1])
        int32 = ir.IntType(32)
        llvm_prefetch = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [byte_pointer, int32, int32, int32]),
            "llvm.prefetch.p0",
        )

        def prefetch(offset: ir.Value) -> None:
            # (address, write=1, locality=3: keep in every cache level, data cache=1)
            builder.call(llvm_prefetch, [builder.gep(start, [offset]), int32(1), int32(3), int32(1)])

        with cgutils.for_range_slice(builder, intp(0), row_bytes, intp(_CACHE_LINE)) as (offset, _):
            prefetch(offset)
        # The row's last byte: a row that starts mid-line ends on one more line than its size gives.
        prefetch(builder.sub(row_bytes, intp(1)))
        return context.get_dummy_value()

    return types.void(table, row), codegen


# What numba-compiled code calls (the intrinsic's own signature is its code generator's).
prefetch_row = cast(Callable[[np.ndarray, int], None], _prefetch_row)
