"""Job functions for the parallel-jobs tests, in a module that imports nothing heavy: each spawned job
process imports the module of its function, and a test module's imports (the trainers) take seconds."""


def echo(text: str) -> str:
    print(f"job says {text}")
    return text.upper()


def boom() -> None:
    raise ValueError("bad job")
