"""Policies the episode loop drives: model-backed agents, the simulated user and the oracle."""

from agents.factory import AGENT_KINDS, build_agent, build_agent_from_settings, build_user
from agents.function_calling import FunctionCallingAgent
from agents.oracle import OracleAgent
from agents.prompted import PromptedAgent, parse_tool_calls, render_for_text_model
from agents.scripted_user import ScriptedUser
from agents.user_simulator import UserSimulator

__all__ = [
    "AGENT_KINDS",
    "FunctionCallingAgent",
    "OracleAgent",
    "PromptedAgent",
    "ScriptedUser",
    "UserSimulator",
    "build_agent",
    "build_agent_from_settings",
    "build_user",
    "parse_tool_calls",
    "render_for_text_model",
]
