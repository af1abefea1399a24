"""The cost model's terms, one module per cost (`cost.step` composes them).

shape: a micro-batch's shape on one device; keyed: the terms a key fixes, once per key; compute: a layer's and the head's compute; placement:
group strides and the parameters a device holds; stages: the layers per pipeline rank and what the
slowest rank computes; tensor, context, expert, fsdp, grad_sync: each parallel dim's communication
and what overlap leaves exposed; contention: what hidden communication takes from compute;
pipeline: bubble and sends; optimizer: the optimizer step; roles, activations, fsdp_buffers, peak:
memory on the fullest pipeline rank; utilisation: tokens/s, MFU, HFU.
"""
