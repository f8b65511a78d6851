"""A small chat template of our own in the Qwen3/Hermes layout, for the tiny tokenizer where TRL is not installed.

The verl venv has no TRL (whose Qwen3 template the TRL tests use), so the verl example builds its tokenizer with
this one: ``<|im_start|>ROLE`` turns ending in ``<|im_end|>``, the tools' JSON schemas in ``<tools>`` in the
system turn, calls as ``<tool_call>`` JSON (what verl's ``hermes`` parser reads) and results as
``<tool_response>`` in a user turn.
"""

TINY_HERMES_TEMPLATE = """\
{%- if tools -%}
<|im_start|>system
{% if messages and messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
Call a tool with <tool_call>{"name": NAME, "arguments": {...}}</tool_call>.<|im_end|>
{% elif messages and messages[0].role == 'system' -%}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'assistant' -%}
<|im_start|>assistant
{{ message.content or '' }}
{%- for call in message.tool_calls or [] -%}
{%- set function = call.function if call.function is defined else call %}
<tool_call>
{"name": "{{ function.name }}", "arguments": {% if function.arguments is string %}{{ function.arguments }}\
{% else %}{{ function.arguments | tojson }}{% endif %}}
</tool_call>
{%- endfor -%}
<|im_end|>
{% elif message.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else -%}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""
