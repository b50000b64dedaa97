"""How sizes and counts read in messages and tables."""


def human_bytes(n: float) -> str:
    """GiB with one decimal; MiB below 1 GiB, so small sizes do not all read 0.0."""
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
