"""MegaScope: see inside the model while it trains (issue 16; nothing here yet).

A server inside the training job streams what the model computes (activations, attention,
logits, per-layer statistics) from hooks on megatron-core, and a page in the browser shows and
steers it (perturb a layer, compare tokens), in the spirit of TransformerLens and nnsight.
Runtime side, like ``mapp.capture``: it never imports the offline analysis; the server binds
127.0.0.1 by default, bounds every queue and message, and evaluates no client input.
"""
