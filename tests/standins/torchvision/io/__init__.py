"""STAND-IN torchvision.io: only the names SGLang imports; the functions raise."""

import enum

from torchvision import _unavailable


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


decode_image = _unavailable("torchvision.io.decode_image")
decode_jpeg = _unavailable("torchvision.io.decode_jpeg")
