# SPDX-License-Identifier: BSD-3-Clause
"""Values the modules of cohort.torch's Horovod-style API share: the reduction operations
(Horovod's values), HorovodInternalError, and the dtypes the operations accept, with their codes
on the wire and the byte views and hashes that describe tensors to the other ranks."""
import zlib

import torch
import torch.distributed as dist


# Reduction operations (same values as Horovod's).
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_OP_NAMES = {Average: 'Average', Sum: 'Sum', Adasum: 'Adasum', Min: 'Min', Max: 'Max',
             Product: 'Product'}
_TORCH_OP = {Average: 'sum', Sum: 'sum', Min: 'min', Max: 'max', Product: 'product'}
_REDUCE_OPS = {'sum': dist.ReduceOp.SUM, 'min': dist.ReduceOp.MIN, 'max': dist.ReduceOp.MAX,
               'product': dist.ReduceOp.PRODUCT, 'avg': dist.ReduceOp.AVG}


class HorovodInternalError(RuntimeError):
    """A collective failed (or ranks disagreed about it); the message starts with the name of
    the operation, then the backend's own message."""


# --------------------------------------------------------------------------------------------
# dtypes

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
           torch.int8, torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64,
           torch.complex128]
_DTYPE_CODE = {dt: i + 1 for i, dt in enumerate(_DTYPES)}    # 0 means "a joined rank"
_DTYPE_BY_CODE = {i + 1: dt for i, dt in enumerate(_DTYPES)}
_DTYPE_BY_NAME = {str(dt)[len('torch.'):]: dt for dt in _DTYPES}
_REDUCIBLE = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
              torch.int8, torch.int16, torch.int32, torch.int64}


def _dtype_name(dt):
    return str(dt)[len('torch.'):]


def _as_bytes(t):
    """A flat uint8 view of a contiguous tensor (any dtype, 0-dim included)."""
    flat = t.reshape(-1)
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def _shape_hash(dims):
    h = len(dims)
    for d in dims:
        h = (h * 1000003 + int(d)) % (1 << 61)
    return h


def _name_hash(name):
    return zlib.crc32(name.encode()) if name else 0
