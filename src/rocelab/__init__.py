"""rocelab: an emulated RoCEv2 fabric lab."""

__version__ = "0.1.0"
