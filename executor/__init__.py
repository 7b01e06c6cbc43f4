"""Runs a pipeplan plan as pipelined inference (torch.distributed.pipelining); see issue #5."""
