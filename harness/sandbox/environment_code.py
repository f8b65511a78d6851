"""An environment's code compiled the one way the sandbox runs it: in the harness (which hands the zygotes the
compiled code, ``code_handover``) and in a child (when the harness could not) alike."""

from __future__ import annotations
import __future__

from types import CodeType

COMPILE_FLAGS = __future__.annotations.compiler_flag
"""Annotations are postponed in environment code, as they always were in the sandbox (``compile`` used to
inherit this from the module that called it); said here so that the harness and a child compile alike."""


def compile_environment(source: str) -> CodeType:
    code: CodeType = compile(source, "<environment>", "exec", flags=COMPILE_FLAGS, dont_inherit=True)
    return code
