"""Lightfoot's definitions, one module per domain; ``assets.definitions`` loads them all."""
