"""The offline toolkit: files -> events table -> graph/alignment -> verdicts. Never imports torch."""
