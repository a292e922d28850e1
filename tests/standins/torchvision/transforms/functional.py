"""STAND-IN torchvision.transforms.functional: the names SGLang imports; functions raise."""

from torchvision import _unavailable
from torchvision.transforms import InterpolationMode

pil_to_tensor = _unavailable("torchvision.transforms.functional.pil_to_tensor")

__all__ = ["InterpolationMode", "pil_to_tensor"]
