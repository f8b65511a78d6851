"""A made-up checkout in τ-bench's layout (sierra-research/tau-bench): one tiny domain, ``shop``, with five tools,
two customers and three items, a ``test`` split of five tasks (the last one's gold changes nothing: it has no
action) and a ``dev`` split of one. Our own content; only the layout (file names, ``Task``/``Action`` literals,
``ALL_TOOLS``, ``load_data``, ``terminate_tools``) is upstream's. The importer reads it as text; its tools run only
in the jail."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DOMAIN = "shop"

TOOL_INFOS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "find_customer",
            "description": "Find a customer's id by their email address.",
            "parameters": {
                "type": "object",
                "properties": {"email": {"type": "string", "description": "The customer's email."}},
                "required": ["email"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_item",
            "description": "Get an item's price and stock.",
            "parameters": {
                "type": "object",
                "properties": {"item_id": {"type": "string", "description": "The item id, such as 'lamp'."}},
                "required": ["item_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "buy_item",
            "description": "Buy some units of an item for a customer, paid from their balance.",
            "parameters": {
                "type": "object",
                "properties": {
                    "customer_id": {"type": "string", "description": "The customer id."},
                    "item_id": {"type": "string", "description": "The item id."},
                    "quantity": {"type": "integer", "description": "How many units."},
                },
                "required": ["customer_id", "item_id", "quantity"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Work out an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "Such as '2 * 3.5'."}},
                "required": ["expression"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "transfer_to_human_agents",
            "description": "Hand the customer over to a person.",
            "parameters": {
                "type": "object",
                "properties": {"summary": {"type": "string", "description": "What the customer needs."}},
                "required": ["summary"],
            },
        },
    },
]

_TOOL_MODULES: dict[str, tuple[str, str]] = {
    "find_customer": (
        "FindCustomer",
        """    @staticmethod
    def invoke(data: Dict[str, Any], email: str) -> str:
        for customer_id, customer in data["customers"].items():
            if customer["email"] == email:
                return customer_id
        return "Error: customer not found"
""",
    ),
    "get_item": (
        "GetItem",
        """    @staticmethod
    def invoke(data: Dict[str, Any], item_id: str) -> str:
        # An unknown id raises KeyError on purpose: the environment answers "Error: 'id'".
        return json.dumps(data["items"][item_id])
""",
    ),
    "buy_item": (
        "BuyItem",
        """    @staticmethod
    def invoke(data: Dict[str, Any], customer_id: str, item_id: str, quantity: int) -> str:
        customer = data["customers"].get(customer_id)
        if customer is None:
            return "Error: customer not found"
        item = data["items"].get(item_id)
        if item is None:
            return "Error: item not found"
        if item["stock"] < quantity:
            return "Error: not enough stock"
        cost = round(item["price"] * quantity, 2)
        if customer["balance"] < cost:
            return "Error: balance too low"
        item["stock"] -= quantity
        customer["balance"] = round(customer["balance"] - cost, 2)
        customer["orders"].append({"item_id": item_id, "quantity": quantity, "paid": cost})
        return json.dumps(customer)
""",
    ),
    "calculate": (
        "Calculate",
        """    @staticmethod
    def invoke(data: Dict[str, Any], expression: str) -> str:
        if not all(char in "0123456789+-*/(). " for char in expression):
            return "Error: invalid characters in expression"
        try:
            return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
        except Exception as e:
            return f"Error: {e}"
""",
    ),
    "transfer_to_human_agents": (
        "TransferToHumanAgents",
        """    @staticmethod
    def invoke(data: Dict[str, Any], summary: str) -> str:
        return "Transfer successful"
""",
    ),
}

DATA: dict[str, dict[str, Any]] = {
    "customers.json": {
        "ann_7": {"email": "ann@example.com", "balance": 100.0, "orders": []},
        "bo_3": {"email": "bo@example.com", "balance": 12.5, "orders": []},
    },
    "items.json": {
        "lamp": {"price": 19.99, "stock": 5},
        "mug": {"price": 4.5, "stock": 0},
        "rug": {"price": 80.0, "stock": 2},
    },
}

WIKI = "# Shop policy\n\nYou help the shop's customers. Find the customer by email before buying anything for them.\n"

TASKS_TEST = """from tau_bench.types import Action, Task

TASKS_TEST = [
    Task(
        annotator="0",
        user_id="ann_7",
        instruction="You are Ann (ann@example.com). You want to buy two lamps.",
        actions=[
            Action(name="find_customer", kwargs={"email": "ann@example.com"}),
            Action(name="buy_item", kwargs={"customer_id": "ann_7", "item_id": "lamp", "quantity": 2}),
        ],
        outputs=[],
    ),
    Task(
        annotator="0",
        user_id="bo_3",
        instruction="You are Bo. You want to know what three lamps would cost, and buy nothing.",
        actions=[
            Action(name="get_item", kwargs={"item_id": "lamp"}),
            Action(name="calculate", kwargs={"expression": "3 * 19.99"}),
        ],
        outputs=["59.97"],
    ),
    Task(
        annotator="0",
        user_id="bo_3",
        instruction="You are Bo (bo@example.com). You want to speak to a person about a broken rug.",
        actions=[
            Action(name="find_customer", kwargs={"email": "bo@example.com"}),
            Action(name="transfer_to_human_agents", kwargs={"summary": "Broken rug."}),
        ],
        outputs=[],
    ),
    Task(
        annotator="0",
        user_id="ann_7",
        instruction="You are Ann (ann@example.com). You want a mug, if there is one.",
        actions=[
            Action(name="find_customer", kwargs={"email": "ann@example.com"}),
            Action(name="buy_item", kwargs={"customer_id": "ann_7", "item_id": "mug", "quantity": 1}),
        ],
        outputs=[],
    ),
    Task(
        annotator="0",
        user_id="bo_3",
        instruction="You are Bo (bo@example.com). You want a refund for a rug you never bought; you accept a no.",
        actions=[],
        outputs=[],
    ),
]
"""

INSTRUCTIONS: list[str] = re.findall(r'instruction="([^"]*)"', TASKS_TEST)
"""The test split's instructions, in order."""

TASKS_DEV = """from tau_bench.types import Action, Task

TASKS_DEV = [
    Task(
        annotator="",
        user_id="bo_3",
        instruction="You are Bo (bo@example.com). You want one lamp.",
        actions=[Action(name="buy_item", kwargs={"customer_id": "bo_3", "item_id": "lamp", "quantity": 1})],
        outputs=[],
    ),
]
"""

ENV_PY = """from typing import Optional, Union

from tau_bench.envs.base import Env
from tau_bench.envs.shop.data import load_data
from tau_bench.envs.shop.tools import ALL_TOOLS
from tau_bench.envs.shop.wiki import WIKI
from tau_bench.envs.user import UserStrategy


class MockShopDomainEnv(Env):
    def __init__(
        self,
        user_strategy: Union[str, UserStrategy] = UserStrategy.LLM,
        user_model: str = "gpt-4o",
        user_provider: Optional[str] = None,
        task_split: str = "test",
        task_index: Optional[int] = None,
    ):
        match task_split:
            case "test":
                from tau_bench.envs.shop.tasks_test import TASKS_TEST as tasks
            case "dev":
                from tau_bench.envs.shop.tasks_dev import TASKS_DEV as tasks
            case _:
                raise ValueError(f"Unknown task split: {task_split}")
        super().__init__(
            data_load_func=load_data,
            tools=ALL_TOOLS,
            tasks=tasks,
            wiki=WIKI,
            rules=[],
            user_strategy=user_strategy,
            user_model=user_model,
            user_provider=user_provider,
            task_index=task_index,
        )
        self.terminate_tools = ["transfer_to_human_agents"]
"""

# The user simulator's module, shaped as upstream's (tau_bench/envs/user.py): the system prompt is an f-string
# with a conditional display of the instruction, built in a method. Our own words.
USER_PY = '''import abc
from typing import Optional


class BaseUserSimulationEnv(abc.ABC):
    metadata = {}


class LLMUserSimulationEnv(BaseUserSimulationEnv):
    def __init__(self, model: str, provider: str) -> None:
        self.model = model
        self.provider = provider

    def build_system_prompt(self, instruction: Optional[str]) -> str:
        instruction_display = (
            ("\\n\\nYour errand: " + instruction + "\\n")
            if instruction is not None
            else "\\n(no errand today)"
        )
        return f"""You play a shopper chatting with a shop's assistant.{instruction_display}
How to play:
- One short line per message.
- Say only what the current step needs; never invent an order number you were not given.
- Write '###STOP###' alone once the errand is done."""

    def reset(self, instruction: Optional[str] = None) -> str:
        self.messages = [
            {"role": "system", "content": self.build_system_prompt(instruction=instruction)},
            {"role": "user", "content": "Welcome to the shop, what can I do for you?"},
        ]
        return ""
'''
USER_OPENING = "Welcome to the shop, what can I do for you?"
"""The fixture simulator's first line to answer (the literal user message of ``reset``)."""
USER_PROMPT_HEAD = "You play a shopper chatting with a shop's assistant."
USER_PROMPT_TAIL = (
    "\nHow to play:\n- One short line per message.\n"
    "- Say only what the current step needs; never invent an order number you were not given.\n"
    "- Write '###STOP###' alone once the errand is done."
)


def user_prompt(instruction: str) -> str:
    """What the fixture's ``build_system_prompt`` returns for ``instruction`` (written out by hand)."""
    return USER_PROMPT_HEAD + "\n\nYour errand: " + instruction + "\n" + USER_PROMPT_TAIL


DATA_INIT = """import json
import os
from typing import Any

FOLDER_PATH = os.path.dirname(__file__)


def load_data() -> dict[str, Any]:
    with open(os.path.join(FOLDER_PATH, "customers.json")) as f:
        customer_data = json.load(f)
    with open(os.path.join(FOLDER_PATH, "items.json")) as f:
        item_data = json.load(f)
    return {
        "customers": customer_data,
        "items": item_data,
    }
"""


def _tool_module(name: str) -> str:
    class_name, body = _TOOL_MODULES[name]
    info = next(t for t in TOOL_INFOS if t["function"]["name"] == name)
    return (
        "import json\nfrom typing import Any, Dict\n\nfrom tau_bench.envs.tool import Tool\n\n\n"
        f"class {class_name}(Tool):\n{body}\n"
        f"    @staticmethod\n    def get_info() -> Dict[str, Any]:\n        return {info!r}\n"
    )


def write_checkout(root: Path) -> Path:
    """Write the checkout under ``root`` and return ``root``."""
    envs = root / "tau_bench" / "envs"
    shop = envs / DOMAIN
    (shop / "tools").mkdir(parents=True)
    (shop / "data").mkdir()
    (root / "LICENSE").write_text("MIT License (made-up test fixture)\n")
    (root / "tau_bench" / "__init__.py").write_text("")
    (root / "tau_bench" / "types.py").write_text("# Task, Action and EnvRunResult live here upstream.\n")
    (envs / "__init__.py").write_text("")
    (envs / "base.py").write_text("# The Env class (step, reward) lives here upstream.\n")
    (envs / "tool.py").write_text("class Tool:\n    pass\n")
    (envs / "user.py").write_text(USER_PY)
    (shop / "__init__.py").write_text("")
    (shop / "env.py").write_text(ENV_PY)
    (shop / "wiki.md").write_text(WIKI)
    (shop / "wiki.py").write_text("WIKI = open('wiki.md').read()\n")
    (shop / "tasks_test.py").write_text(TASKS_TEST)
    (shop / "tasks_dev.py").write_text(TASKS_DEV)
    (shop / "data" / "__init__.py").write_text(DATA_INIT)
    for file, content in DATA.items():
        (shop / "data" / file).write_text(json.dumps(content, indent=2))
    imports = "".join(f"from .{name} import {cls}\n" for name, (cls, _) in _TOOL_MODULES.items())
    listed = "".join(f"    {cls},\n" for cls, _ in _TOOL_MODULES.values())
    (shop / "tools" / "__init__.py").write_text(f"{imports}\n\nALL_TOOLS = [\n{listed}]\n")
    for name in _TOOL_MODULES:
        (shop / "tools" / f"{name}.py").write_text(_tool_module(name))
    return root
