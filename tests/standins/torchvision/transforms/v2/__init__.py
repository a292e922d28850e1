"""STAND-IN torchvision.transforms.v2 (a package so `v2.functional` imports)."""
