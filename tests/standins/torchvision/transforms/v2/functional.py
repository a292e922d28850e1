"""STAND-IN torchvision.transforms.v2.functional: imported as a module by SGLang; any
attribute read from it is a function that raises."""

from torchvision import _unavailable


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _unavailable(f"torchvision.transforms.v2.functional.{name}")
