"""Failures a conversion reports to the gateway, each with its own exit code."""

from __future__ import annotations


class ConversionError(Exception):
    """A failure with a message meant for the user (one line, no traceback)."""

    exit_code = 1


class ModelNotFoundError(ConversionError):
    exit_code = 2


class ParityError(ConversionError):
    exit_code = 3


class TargetExistsError(ConversionError):
    exit_code = 4


class OutOfMemoryError(ConversionError):
    exit_code = 5


class DiskFullError(ConversionError):
    exit_code = 6


class UnsupportedModelError(ConversionError):
    """A model that cannot be served exactly as asked: a kind embedgate does not serve (or
    not through this request), custom code without trust_remote_code, a module or setting
    the exported graph cannot reproduce. Nothing is published."""

    exit_code = 8


class RemoteCodeRefused(UnsupportedModelError):
    """A model that runs code of its own (its modeling files, custom modules), loaded without
    trust_remote_code: what the request did not allow, rather than what cannot be served."""

    exit_code = 9


class RepositoryError(ConversionError):
    """The model repository could not be read or written (an S3 service unreachable,
    access denied): nothing about the model itself."""

    exit_code = 7
