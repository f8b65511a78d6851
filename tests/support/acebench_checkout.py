"""A small made-up checkout in ACEBench's layout (our own content): a notes app over a base device API, four
multi_turn and three multi_step tasks. multi_turn 2 has a milestone that does not parse; multi_turn 3's gold does
not reach its ground truth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BASE_API = """
class BaseApi:
    def __init__(self):
        self.wifi = False
        self.logged_in = True

    def _load_scenario(self, scenario, long_context=False):
        self.wifi = scenario.get("wifi", False)
        self.logged_in = scenario.get("logged_in", True)

    def turn_on_wifi(self):
        self.wifi = True
        return {"status": True, "message": "wifi is on"}
"""

NOTES = """
from typing import Dict
from model_inference.{category}.scenariosen.phone_platform.base_api import BaseApi


class NoteApi(BaseApi):
    def __init__(self):
        super().__init__()
        self.notes: Dict[int, Dict[str, str]] = {{1: {{"title": "old", "text": "an old note"}}}}
        self.next_id = 2

    def _load_scenario(self, scenario, long_context=False):
        if "notes" in scenario:
            self.notes = {{int(k): v for k, v in scenario["notes"].items()}}
        self.wifi = scenario.get("wifi", self.wifi)

    def add_note(self, title: str, text: str):
        if not self.wifi:
            return {{"status": False, "message": "no wifi"}}
        self.notes[self.next_id] = {{"title": title, "text": text}}
        self.next_id += 1
        return {{"status": True, "note_id": self.next_id - 1}}

    def delete_note(self, note_id: int):
        del self.notes[note_id]
        return {{"status": True}}

    def list_notes(self):
        return [note["title"] for note in self.notes.values()]

    def count_notes(self):
        return len(self.notes)
"""

FUNCTIONS: list[dict[str, Any]] = [
    {
        "name": "turn_on_wifi",
        "description": "Turn the wifi on.",
        "parameters": {"type": "dict", "required": [], "properties": {}},
    },
    {
        "name": "add_note",
        "description": "Add a note.",
        "parameters": {
            "type": "dict",
            "required": ["title", "text"],
            "properties": {
                "title": {"type": "string", "description": "The note's title."},
                "text": {"type": "string", "description": "The note's text."},
            },
        },
    },
    {
        "name": "delete_note",
        "description": "Delete a note by its id.",
        "parameters": {
            "type": "dict",
            "required": ["note_id"],
            "properties": {"note_id": {"type": "integer", "description": "The note's id."}},
        },
    },
    {
        "name": "list_notes",
        "description": "The titles of all notes.",
        "parameters": {"type": "dict", "required": [], "properties": {}},
    },
]

OLD = {"title": "old", "text": "an old note"}
MILK = {"title": "shopping", "text": "Buy milk"}


def _state(wifi: bool, notes: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"BaseApi": {"wifi": wifi, "logged_in": True}}, {"NoteApi": {"notes": notes}}]


MULTI_TURN: list[tuple[str, dict[str, Any], list[Any], list[dict[str, Any]]]] = [
    (
        "Your name is Ann. You want a note titled 'shopping' that says 'Buy milk'.",
        {"BaseApi": {"wifi": False}},
        ["[turn_on_wifi()]", "[add_note(title='shopping', text='Buy milk')]"],
        _state(True, {"1": OLD, "2": MILK}),
    ),
    (
        "Your name is Ann. You want your oldest note deleted.",
        {"BaseApi": {"wifi": True}},
        ["[list_notes()]", "[delete_note(note_id=1)]"],
        _state(True, {}),
    ),
    (
        "Your name is Ann. You want a note titled 'Bob's list'.",
        {"BaseApi": {"wifi": True}},
        ["[add_note(title='Bob's list', text='eggs')]"],
        _state(True, {"1": OLD, "2": {"title": "Bob's list", "text": "eggs"}}),
    ),
    (
        "Your name is Ann. You want a note titled 'shopping' that says 'Buy milk'.",
        {"BaseApi": {"wifi": True}},
        ["[add_note(title='shopping', text='Buy milk')]"],
        _state(True, {"1": OLD, "2": {"title": "shopping", "text": "Buy bread"}}),
    ),
]

MULTI_STEP: list[tuple[str, dict[str, Any], list[Any], list[dict[str, Any]]]] = [
    (
        "Add a note titled 'shopping' that says 'Buy milk'.",
        {"BaseApi": {"wifi": True}},
        ["[add_note(title='shopping', text='Buy milk')]"],
        _state(True, {"1": OLD, "2": MILK}),
    ),
    (
        "The wifi is off. Turn it on, then add a note titled 'shopping' that says 'Buy milk'.",
        {"BaseApi": {"wifi": False}},
        [["[turn_on_wifi()]", "[add_note(title='shopping', text='Buy milk')]"], ["[add_note(title='x', text='y')]"]],
        _state(True, {"1": OLD, "2": MILK}),
    ),
    (
        "Delete the note titled 'old'.",
        {"BaseApi": {"wifi": True}},
        ["[list_notes()]", "[delete_note(note_id=1)]"],
        _state(True, {}),
    ),
]


AGENT_PROMPTS = {
    "multi_turn": (
        "You act for the user. Write calls as [ApiName(key='value')] and nothing else; ask when unsure.\n",
        "APIs:\n {functions}\n\nHistory:\n{history}",
    ),
    "multi_step": (
        "You act alone. Write calls as [ApiName(key='value')]; say \"finish conversation\" when done.\n",
        "APIs (JSON): {functions}. History: {history}\n",
    ),
}
"""Made-up agent prompts of the text setting (upstream's MULTI_TURN_AGENT_PROMPT_{SYSTEM,USER}_<LANG>)."""


USER_PROMPTS = {
    ("BaseApi", "en"): "You are a phone owner talking to an assistant.\n\nInstruction: {instruction}\n\n"
    "- One line per message.\n- Say 'finish conversation' alone when every task is done.\n",
    ("Travel", "en"): "You are a traveller talking to an agent.\n\nInstruction: {instruction}\n\n"
    "- One line per message.\n- Say 'finish conversation' alone when the trip is booked.\n",
    ("BaseApi", "zh"): "你是手机的主人。\n\nInstruction: {instruction}\n\n- 完成后说 'finish conversation'。\n",
    ("Travel", "zh"): "你是旅客。\n\nInstruction: {instruction}\n\n- 订好后说 'finish conversation'。\n",
}
"""Made-up user prompts (upstream's SYSTEM_PROMPT_{BASE,TRAVEL}_<LANG> of model_inference/multi_turn/APIModel_user.py)."""
USER_OPENINGS = {"en": "Anything I can do for you today?", "zh": "今天我能帮你做什么？"}
"""Made-up first lines the user answers (upstream's literal user messages of APIUSER.get_init_prompt)."""


def _user_module() -> str:
    """The user simulator's module, shaped as upstream's: prompt constants, and the opening line a literal message
    in each language's branch of ``APIUSER.get_init_prompt``."""
    constants = "".join(
        f"SYSTEM_PROMPT_{'BASE' if variant == 'BaseApi' else 'TRAVEL'}_{language.upper()} = {text!r}\n"
        for (variant, language), text in USER_PROMPTS.items()
    )
    branches = ""
    for keyword, language in (("if", "zh"), ("elif", "en")):
        branches += (
            f"        {keyword} self.language == {language!r}:\n"
            "            if 'BaseApi' in self.involved_class:\n"
            f"                system_prompt = SYSTEM_PROMPT_BASE_{language.upper()}\n"
            "            elif 'Travel' in self.involved_class:\n"
            f"                system_prompt = SYSTEM_PROMPT_TRAVEL_{language.upper()}\n"
            "            self.messages = [\n"
            "                {'role': 'system', 'content': system_prompt.format(instruction=question)},\n"
            f"                {{'role': 'user', 'content': {USER_OPENINGS[language]!r}}},\n"
            "            ]\n"
        )
    return (
        "import os\n\n" + constants + "\n\nclass APIUSER:\n"
        "    def __init__(self, model_name, involved_class, temperature=0.001, top_p=1, max_tokens=1000, "
        "language='zh'):\n"
        "        self.involved_class = involved_class\n"
        "        self.language = language\n"
        "        self.messages = []\n\n"
        "    def get_init_prompt(self, question):\n" + branches + "        return self.messages\n"
    )


def _agent_module(category: str) -> str:
    system, user = AGENT_PROMPTS[category]
    return (
        "import re\n\n"
        f"MULTI_TURN_AGENT_PROMPT_SYSTEM_EN = {system!r}\n"
        f"MULTI_TURN_AGENT_PROMPT_USER_EN = {user!r}\n"
        f"MULTI_TURN_AGENT_PROMPT_SYSTEM_ZH = {('中文。' + system)!r}\n"
        f"MULTI_TURN_AGENT_PROMPT_USER_ZH = {user!r}\n"
    )


def _lines(values: list[Any]) -> str:
    return "".join(json.dumps(value, ensure_ascii=False) + "\n" for value in values)


def write_checkout(root: Path) -> Path:
    """Write the made-up checkout under ``root`` and return it."""
    files: dict[str, str] = {
        "LICENSE.md": "MIT License (fixture)\n",
        "eval_main.py": "# evaluator entry point (not read by the importer)\n",
        "model_eval/checker.py": "# checker (not read by the importer)\n",
        "model_inference/apimodel_inference.py": (
            'SAVED_CLASS = {"BaseApi": ["wifi", "logged_in"], "NoteApi": ["notes"]}\n'
        ),
        "model_inference/prompt_en.py": 'BASE_PROMPT_EN = """You run a phone."""\nTRAVEL_PROMPT_EN = """Travel."""\n',
        "model_inference/prompt_zh.py": 'BASE_PROMPT_ZH = """手机。"""\nTRAVEL_PROMPT_ZH = """旅行。"""\n',
    }
    for category, tasks in (("multi_turn", MULTI_TURN), ("multi_step", MULTI_STEP)):
        package = f"model_inference.{category}.scenariosen.phone_platform"
        mapping = {"BaseApi": f"{package}.base_api", "NoteApi": f"{package}.notes"}
        files[f"model_inference/{category}/APIModel_agent.py"] = _agent_module(category)
        if category == "multi_turn":
            files[f"model_inference/{category}/APIModel_user.py"] = _user_module()
        files[f"model_inference/{category}/{category}_utils.py"] = (
            f"CLASS_FILE_PATH_MAPPING_EN = {mapping!r}\nCLASS_FILE_PATH_MAPPING_ZH = {{}}\n"
        )
        folder = f"model_inference/{category}/scenariosen/phone_platform"
        files[f"{folder}/base_api.py"] = BASE_API
        files[f"{folder}/notes.py"] = NOTES.format(category=category)
        records, answers = [], []
        for number, (question, config, milestones, truth) in enumerate(tasks):
            upstream_id = f"agent_{category}_{number}"
            records.append(
                {
                    "id": upstream_id,
                    "question": question,
                    "initial_config": config,
                    "path": [],
                    "function": FUNCTIONS,
                    "involved_classes": ["BaseApi", "NoteApi"],
                }
            )
            answers.append({"id": upstream_id, "ground_truth": truth, "mile_stone": milestones})
        files[f"data_all/data_en/data_agent_{category}.json"] = _lines(records)
        files[f"data_all/data_en/possible_answer/data_agent_{category}.json"] = _lines(answers)
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root
