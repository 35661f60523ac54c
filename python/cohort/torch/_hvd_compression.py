# SPDX-License-Identifier: BSD-3-Clause
"""Gradient compression of cohort.torch's Horovod-style API (as Horovod's: Compression.fp16 casts
floating-point tensors to float16 for the wire), used by allreduce and DistributedOptimizer."""
import torch


class Compressor(object):
    """Interface for compressing and decompressing a tensor."""
    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and the context needed to decompress it."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor restored from what was received."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression (the default)."""
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 and are cast back; others are unchanged."""
    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.type(ctx)
        return tensor


class Compression(object):
    """Gradient compression used by allreduce and DistributedOptimizer."""
    none = NoneCompressor
    fp16 = FP16Compressor
