#!/usr/bin/env python3
"""Chat-template goldens for tern's Jinja interpreter (src/chat/).

Renders every template in tests/data/templates/src/*.jinja over a fixed set of conversations with
Hugging Face transformers' own `render_jinja_template` (the function `apply_chat_template` calls), so
the reference is jinja2 configured exactly as HF configures it: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, the `generation` tag, HF's `tojson`, `raise_exception`,
`strftime_now`. Messages go through HF's `_normalize_chat_messages` first (None-valued keys dropped),
as `apply_chat_template` does.

Writes:
  tests/data/templates/cases.json           the conversations (inputs), one entry per case
  tests/data/templates/goldens/<name>.json  per template: {case: {"output": str} | {"error": str}}
  tests/data/templates/snippets.json        small templates probing one jinja2 semantic each

A template that raises in Python records the error; tern must raise for it too.
`strftime_now` is pinned to FIXED_NOW so renders are reproducible (tern's test passes the same time).

Usage: python3 tools/gen_template_goldens.py [--data tests/data/templates]
Needs: transformers (>= 4.5x with utils/chat_template_utils.render_jinja_template), jinja2 >= 3.1.6.
"""
import argparse
import datetime as real_datetime
import json
import os
import sys

import jinja2
from transformers.utils import chat_template_utils as ctu

# 2025-03-14 09:26:53, a Friday: Llama 3.x templates print it as "14 Mar 2025".
FIXED_NOW = real_datetime.datetime(2025, 3, 14, 9, 26, 53)


class _FixedDatetime(real_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


# HF's strftime_now closure reads the module global `datetime` at call time.
ctu.datetime = _FixedDatetime

BOS, EOS = "<s>", "</s>"
# Templates whose model we have: render them with that model's own special tokens.
SPECIAL_TOKENS = {
    "HuggingFaceTB-SmolLM2-135M-Instruct": ("<|im_start|>", "<|im_end|>"),
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_code",
        "description": "Search the repository for a pattern.",
        "parameters": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A regular expression."},
                "paths": {"type": "array", "items": {"type": "string"}, "description": "Folders to search."},
                "max_results": {"type": "integer", "default": 20},
                "min_score": {"type": "number", "default": 0.5},
            },
            "required": ["pattern"],
        },
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]
# Every parameter described (Command R+'s tool_use template reads each one's description).
DESCRIBED_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the workspace.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the workspace."},
                "max_lines": {"type": "integer", "description": "Stop after this many lines."},
            },
            "required": ["path"],
        },
    },
}

SYSTEM = {"role": "system", "content": "You are a careful assistant."}
USER = {"role": "user", "content": "What is the weather in Paris?"}
CALL_WEATHER = {"id": "call0a1b2", "type": "function",
                "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}}
CALL_SEARCH = {"id": "call3c4d5", "type": "function",
               "function": {"name": "search_code",
                            "arguments": {"pattern": "fn\\s+main", "paths": ["src", "tests"], "max_results": 5,
                                          "min_score": 0.75}}}
ASSISTANT_CALL = {"role": "assistant", "content": "", "tool_calls": [CALL_WEATHER]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call0a1b2", "name": "get_weather",
               "content": "{\"temperature\": 18.5, \"sky\": \"cloudy\"}"}
ANSWER = {"role": "assistant", "content": "It is 18.5 °C and cloudy in Paris."}

# name -> (messages, tools or None, add_generation_prompt, extra template kwargs)
CASES = {
    "user_only": ([USER], None, True, {}),
    "user_only_no_generation_prompt": ([USER], None, False, {}),
    "system_user": ([SYSTEM, USER], None, True, {}),
    "multi_turn": ([SYSTEM, {"role": "user", "content": "Hi!"},
                    {"role": "assistant", "content": "Hello. How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}], None, True, {}),
    "multi_turn_closed": ([SYSTEM, {"role": "user", "content": "Hi!"},
                           {"role": "assistant", "content": "Hello. How can I help?"}], None, False, {}),
    "tools_offered": ([SYSTEM, USER], TOOLS, True, {}),
    "tools_no_system": ([USER], TOOLS, True, {}),
    "tool_call_turn": ([SYSTEM, USER, ASSISTANT_CALL], TOOLS, False, {}),
    "tool_result": ([SYSTEM, USER, ASSISTANT_CALL, TOOL_RESULT], TOOLS, True, {}),
    "tool_round_trip": ([SYSTEM, USER, ASSISTANT_CALL, TOOL_RESULT, ANSWER,
                         {"role": "user", "content": "And in Lyon?"}], TOOLS, True, {}),
    "parallel_tool_calls": ([USER, {"role": "assistant", "content": "Let me check both.",
                                    "tool_calls": [CALL_WEATHER, CALL_SEARCH]},
                             TOOL_RESULT,
                             {"role": "tool", "tool_call_id": "call3c4d5", "name": "search_code",
                              "content": "src/main.rs:1: fn main() {"}], TOOLS, True, {}),
    "tool_call_string_arguments": ([USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call6e7f8", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call6e7f8", "content": "sunny"}], TOOLS, True, {}),
    "reasoning": ([{"role": "user", "content": "What is 17 * 3?"},
                   {"role": "assistant", "reasoning_content": "17 * 3 = 51.", "content": "51"},
                   {"role": "user", "content": "And 51 / 3?"}], None, True, {}),
    "reasoning_last": ([{"role": "user", "content": "What is 17 * 3?"},
                        {"role": "assistant", "reasoning_content": "17 times 3 is 51.", "content": "51"}],
                       None, False, {}),
    "reasoning_tool_call": ([SYSTEM, USER, {"role": "assistant", "reasoning_content": "I need the weather tool.",
                                            "content": "", "tool_calls": [CALL_WEATHER]}, TOOL_RESULT],
                            TOOLS, True, {}),
    "thinking_disabled": ([USER], None, True, {"enable_thinking": False}),
    "thinking_enabled": ([SYSTEM, USER], TOOLS, True, {"enable_thinking": True}),
    "special_characters": ([{"role": "system", "content": "  Quotes ' \" and \\ backslash; {{ not a tag }} {% x %}\n"},
                            {"role": "user", "content": "Ünïcödé ✓ 日本語 🦀\ttab\nnew line <tag> & amp  "},
                            {"role": "assistant", "content": "\n  padded answer \n\n", "tool_calls": [
                                {"id": "callxyz99", "type": "function", "function": {"name": "search_code",
                                 "arguments": {"pattern": "é\"\\n", "paths": [], "max_results": 1e3,
                                               "min_score": 1e-7, "nested": {"none": None, "flag": True,
                                                                             "big": 12345678901234, "neg": -0.0,
                                                                             "x": 3.0, "y": 0.1}}}}]},
                            {"role": "tool", "tool_call_id": "callxyz99", "name": "search_code", "content": ""},
                            {"role": "user", "content": "ok"}], TOOLS, True, {}),
    "tools_described": ([SYSTEM, {"role": "user", "content": "Show me README.md"}], [DESCRIBED_TOOL], True, {}),
    # Templates that take their functions as a preformatted string (firefunction) instead of `tools`.
    "functions_variable": ([SYSTEM, USER], None, True,
                           {"functions": json.dumps([WEATHER_TOOL["function"]]), "datetime": "2025-03-14"}),
    "content_parts": ([{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                       {"role": "user", "content": [{"type": "text", "text": "Describe"},
                                                    {"type": "text", "text": "this."}]}], None, True, {}),
}


# Small templates, each probing one piece of jinja2 semantics, rendered in the same environment.
# (name, template, context)
SNIPPETS = [
    # whitespace control, trim_blocks, lstrip_blocks
    ("trim_blocks", "{% if true %}\nx\n{% endif %}\ny", {}),
    ("lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("lstrip_not_for_output", "a\n    {{ 'b' }}\n", {}),
    ("minus_strips", "a   {{- 'b' -}}   c  {%- if true -%}  d  {%- endif %}", {}),
    ("plus_keeps", "a\n    {%+ if true %}b{% endif +%}\nc", {}),
    ("comment_trim", "a\n  {# note #}\nb{#- x -#}  c", {}),
    ("raw_block", "{% raw %}{{ not rendered }}{% endraw %}", {}),
    ("crlf_source", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("trailing_newline_dropped", "x\n", {}),
    ("unicode_whitespace_strip", "a\u3000 {{- 'b' }}", {}),
    # literals and printing
    ("print_values", "{{ none }}|{{ true }}|{{ 1 }}|{{ 1.0 }}|{{ 1.5e-7 }}|{{ 1e16 }}|{{ 123456789.125 }}|{{ -0.0 }}", {}),
    ("print_containers", "{{ [1, 'a', none, true, 2.5] }}|{{ {'k': \"it's\", 'q': 'say \"hi\"'} }}|{{ (1,) }}|{{ () }}", {}),
    ("repr_escapes", "{{ ['a\\nb', 'tab\\t', 'back\\\\slash', '\\x01', 'é✓'] }}", {}),
    ("string_escapes", "{{ 'a\\nb\\t\\\"c\\\"' }}|{{ \"it's\" }}|{{ '\\u00e9\\x41' }}|{{ 'keep\\q' }}", {}),
    ("adjacent_strings", "{{ 'a' 'b' \"c\" }}", {}),
    ("undefined_prints_empty", "[{{ missing }}][{{ d.missing }}]", {"d": {}}),
    ("int_float_keys", "{{ {1: 'a', 2.5: 'b'}[1] }}{{ {1: 'a'} }}", {}),
    # arithmetic
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ -2 ** 2 }}", {}),
    ("float_arithmetic", "{{ 0.1 + 0.2 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 / 3 }} {{ 10 * 1.1 }}", {}),
    ("string_ops", "{{ 'ab' * 3 }}|{{ 'a' + 'b' }}|{{ 'n=' ~ 3 ~ none ~ true }}|{{ [1] + [2] }}", {}),
    ("concat_error", "{{ 'a' + 1 }}", {}),
    ("undefined_arithmetic_error", "{{ missing + 1 }}", {}),
    ("division_by_zero", "{{ 1 / 0 }}", {}),
    # comparisons and logic
    ("comparisons", "{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' == 'a' }}{{ 'a' != 'a' }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'b' > 'a' }}{{ [1, 2] < [1, 3] }}", {}),
    ("chained_comparison", "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}", {}),
    ("compare_type_error", "{{ 'a' < 1 }}", {}),
    ("logic_returns_operands", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ none or [] }}|{{ not none }}", {}),
    ("in_operator", "{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 'q' not in d }}{{ 'x' in missing }}", {"d": {"k": 1}}),
    ("in_none_error", "{{ 'x' in none }}", {}),
    # tests
    ("tests_types", "{{ x is defined }}{{ y is defined }}{{ n is none }}{{ s is string }}{{ d is mapping }}{{ l is sequence }}{{ s is sequence }}{{ d is iterable }}{{ 1 is number }}{{ true is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is boolean }}", {"x": 1, "n": None, "s": "s", "d": {}, "l": []}),
    ("tests_undefined", "{{ u is iterable }}{{ u is sequence }}{{ u is mapping }}{{ u is string }}{{ u is none }}{{ u is undefined }}", {}),
    ("tests_values", "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 2 is eq 2 }}{{ 2 is gt 1 }}{{ 'a' is in 'abc' }}", {}),
    ("test_sameas", "{{ none is sameas none }}{{ x is sameas x }}", {"x": [1]}),
    ("test_without_parens", "{{ 'x' is equalto 'x' }}{{ 3 is ge 4 }}", {}),
    # conditionals and loops
    ("if_elif_else", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
    ("conditional_expression", "{{ 'yes' if flag else 'no' }}|{{ 'a' if false }}|{{ ('a' if false) is defined }}", {"flag": True}),
    ("loop_variables", "{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}", {"items": ["a", "b", "c"]}),
    ("loop_cycle", "{% for x in [1, 2, 3] %}{{ loop.cycle('odd', 'even') }} {% endfor %}", {}),
    ("loop_filter", "{% for x in [1, 2, 3, 4] if x % 2 == 0 %}{{ loop.index }}:{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", {}),
    ("loop_else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in missing %}y{% else %}none{% endfor %}", {}),
    ("loop_dict_and_string", "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héé' %}[{{ c }}]{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", {"d": {"x": 1, "y": "z"}}),
    ("loop_none_error", "{% for x in none %}{% endfor %}", {}),
    ("break_continue", "{% for n in [1, 2, 3, 4] %}{% if n == 2 %}{% continue %}{% endif %}{% if n == 4 %}{% break %}{% endif %}{{ n }}{% endfor %}", {}),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    # scoping
    ("set_scope", "{% set a = 1 %}{% for x in [1] %}{% set a = 2 %}{{ a }}{% endfor %}{{ a }}{% if true %}{% set b = 3 %}{% endif %}{{ b }}", {}),
    ("set_per_iteration", "{% for i in [1, 2] %}{{ y }}{% set y = i %}{{ y }}{% endfor %}", {"y": 0}),
    ("namespace", "{% set ns = namespace(total=0, seen=false) %}{% for x in [1, 2, 3] %}{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }} {{ ns.seen }} {{ ns.missing is defined }}", {}),
    ("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}),
    ("set_attr_on_dict_error", "{% set d = {'a': 1} %}{% set d.a = 2 %}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 'x' %}{{ t }}", {}),
    ("set_block", "{% set body %}<{{ 1 + 1 }}>\n{% endset %}[{{ body }}]{% set trimmed | trim | upper %}  x  {% endset %}[{{ trimmed }}]", {}),
    ("macro_defaults", "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m(1, c=3) }}|{{ m() }}", {}),
    ("macro_scope", "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}{% for x in [5] %}{{ m() }}{% endfor %}", {}),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("filter_block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}{%- filter trim -%}  x  {%- endfilter %}", {}),
    ("generation_block", "a{% generation %}b{{ 1 }}{% endgeneration %}c", {}),
    # attribute and item access
    ("getattr_getitem", "{{ d.k }}{{ d['k'] }}{{ l[0] }}{{ l[-1] }}{{ l[5] }}{{ s[1] }}{{ d.items is defined }}{{ d['items'] }}", {"d": {"k": "v", "items": "I"}, "l": [1, 2], "s": "héllo"}),
    ("attribute_of_undefined_error", "{{ d.a.b }}", {"d": {}}),
    ("attribute_of_none", "[{{ n.a }}]", {"n": None}),
    ("slices", "{{ l[1:] }}{{ l[:2] }}{{ l[::-1] }}{{ l[::2] }}{{ l[-1:0:-1] }}{{ l[:-2:-1] }}{{ 'héllo'[1:3] }}{{ 'abc'[::-1] }}{{ l[10:] }}", {"l": [1, 2, 3, 4, 5]}),
    ("dict_methods", "{{ d.get('k') }}{{ d.get('q', 'dflt') }}{{ d.get('q') }}{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}", {"d": {"k": "v", "n": 1}}),
    ("list_mutation_error", "{% set l = [1] %}{{ l.append(2) }}", {}),
    ("dict_mutation_error", "{{ d.update({'a': 1}) }}", {"d": {}}),
    # string methods
    ("str_strip", "[{{ '  x  '.strip() }}][{{ '\\n\\nx\\n'.strip('\\n') }}][{{ 'xxay'.lstrip('x') }}][{{ 'ayyx'.rstrip('xy') }}][{{ ' a '.strip(none) }}]", {}),
    ("str_split", "{{ 'a<b>c<b>'.split('<b>') }}{{ ' a  b '.split() }}{{ 'x'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'r</think>a'.split('</think>')[-1] }}", {}),
    ("str_case", "{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'ÉtÉ'.lower() }}|{{ 'straße'.upper() }}|{{ \"they're bill's\".title() }}", {}),
    ("str_predicates", "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('x') }}{{ 'abc'.startswith(('x', 'a')) }}{{ '123'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ ''.isdigit() }}", {}),
    ("str_find_replace", "{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}{{ 'hello'.count('l') }}{{ 'a-b-c'.replace('-', '+') }}{{ 'a-b-c'.replace('-', '+', 1) }}{{ 'ab'.replace('', '.') }}", {}),
    ("str_format", "{{ '{} and {}'.format('a', 1) }}|{{ '{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='n') }}|{{ '{{literal}}'.format() }}", {}),
    ("printf_format", "{{ '%s=%d' % ('a', 3) }}|{{ '%5.2f|%-4s|%04d|%x|%r|%%' % (3.14159, 'ab', 42, 255, 'q') }}|{{ '%(k)s' % {'k': 'v'} }}|{{ '%s' % [1, 'x'] }}|{{ '%.1s' % 'héllo' }}|{{ '%+d %e %g' % (5, 1234.5, 0.0001) }}", {}),
    ("printf_format_filter", "{{ '%s, %s' | format('a', 1) }}|{{ '%(x)s!' | format(x='y') }}", {}),
    ("printf_format_errors", "{{ '%s %s' % ('a',) }}", {}),
    ("str_join_method", "{{ ', '.join(['a', 'b']) }}|{{ ''.join('abc') }}", {}),
    ("str_misc", "{{ 'Hello'.removeprefix('He') }}{{ 'Hello'.removesuffix('lo') }}{{ 'a\\nb\\r\\nc'.splitlines() }}{{ '42'.zfill(5) }}", {}),
    ("unknown_str_attribute", "[{{ 'abc'.nope }}]", {}),
    # filters
    ("filters_basic", "{{ '  x  ' | trim }}|{{ xs | length }}|{{ 'héllo' | length }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ xs | join('-') }}|{{ xs | first }}{{ xs | last }}|{{ missing | default('d') }}|{{ '' | default('e', true) }}|{{ 5 | string }}", {"xs": [1, 2, 3]}),
    ("filter_precedence", "{{ 'a' + ' b ' | trim + 'c' }}|{{ -1 | abs }}|{{ 1 + 2 | string }}", {}),
    ("filter_trim_chars", "{{ '--x--' | trim('-') }}", {}),
    ("filter_title_capitalize", "{{ 'hello wORLD-foo (bar' | title }}|{{ 'hELLO' | capitalize }}", {}),
    ("filter_items_dictsort", "{{ d | items | list }}|{{ d | dictsort }}|{{ d | dictsort(by='value') }}|{{ d | dictsort(reverse=true) }}", {"d": {"b": 2, "A": 3, "c": 1}}),
    ("filter_sort_unique", "{{ ['b', 'A', 'c'] | sort }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ ['a', 'A', 'b'] | unique | list }}|{{ users | sort(attribute='age') | map(attribute='n') | list }}", {"users": [{"n": "x", "age": 3}, {"n": "y", "age": 1}]}),
    ("filter_select_reject", "{{ [1, 0, 2, none] | select | list }}|{{ [1, 2, 3, 4] | reject('odd') | list }}|{{ [1, 2, 3] | select('gt', 1) | list }}", {}),
    ("filter_selectattr", "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}|{{ (msgs | selectattr('role', 'equalto', 'user') | list)[-1].content }}|{{ msgs | rejectattr('tool_calls') | map(attribute='role') | join(',') }}|{{ msgs | selectattr('tool_calls', 'defined') | list | length }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [1]}, {"role": "user", "content": "b"}]}),
    ("filter_map", "{{ [1.5, 2.5] | map('int') | list }}|{{ ['a', 'b'] | map('upper') | join }}|{{ ds | map(attribute='x.y', default='z') | list }}", {"ds": [{"x": {"y": 1}}, {}]}),
    ("generator_is_truthy", "{{ 'yes' if ([] | select) else 'no' }}|{{ [] | select | list }}", {}),
    ("generator_length_error", "{{ [1] | map('string') | length }}", {}),
    ("generator_tojson_error", "{{ [1] | select | tojson }}", {}),
    ("filter_select_on_none", "{{ none | selectattr('a') | list }}", {}),
    ("filter_numbers", "{{ '42' | int }}{{ '4.7' | int }}{{ 'x' | int(7) }}{{ 3.9 | int }}|{{ '1.5' | float }}{{ 'x' | float }}|{{ 2.675 | round(2) }}|{{ 3.5 | round }}|{{ 2.5 | round }}|{{ 3 | round }}|{{ 1.23 | round(1, 'ceil') }}|{{ [1, 2.5] | sum }}|{{ [3, 1] | min }}{{ [3, 1] | max }}", {}),
    ("filter_indent", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('> ', blank=true) }}", {}),
    ("filter_replace_reverse", "{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'abc' | reverse }}|{{ [1, 2] | reverse | list }}", {}),
    ("filter_escape_safe", "{{ '<a href=\"x\">&</a>' | e }}|{{ '<b>' | safe }}|{{ '<i>' | safe + '<u>' }}|{{ '<i>' + '<u>' | safe }}", {}),
    ("filter_list_string", "{{ 'ab' | list }}|{{ {'k': 1} | list }}|{{ [1, [2]] | string }}", {}),
    ("filter_count_wordcount_center", "{{ [1, 2] | count }}|{{ 'a b  c' | wordcount }}|[{{ 'ab' | center(6) }}]", {}),
    ("filter_batch", "{{ [1, 2, 3] | batch(2) | list }}|{{ [1, 2, 3] | batch(2, 0) | list }}", {}),
    ("unknown_filter_in_if_is_runtime", "{% if false %}{{ x | nope }}{% endif %}ok", {}),
    ("unknown_filter_error", "{{ x | nope }}", {}),
    # tojson (HF's: ensure_ascii=False)
    ("tojson", "{{ {'a': [1, 'x', none, true, 1.5, -0.0, 1e20, 'é✓\\n\"'], 'b': {}} | tojson }}", {}),
    ("tojson_indent", "{{ {'b': [1, {'c': 'x'}], 'a': {}, 'e': []} | tojson(indent=4) }}|{{ [1] | tojson(indent=0) }}|{{ {'a': 1} | tojson(indent='\\t') }}", {}),
    ("tojson_options", "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ {'a': [1, 2]} | tojson(separators=(',', ':')) }}|{{ 'é🦀' | tojson(ensure_ascii=true) }}", {}),
    ("tojson_int_keys", "{{ {1: 'a', 2.5: 'b', true: 'c', none: 'd'} | tojson }}", {}),
    ("tojson_undefined_error", "{{ missing | tojson }}", {}),
    ("tojson_namespace_error", "{{ namespace(a=1) | tojson }}", {}),
    ("tojson_of_input", "{{ data | tojson }}", {"data": {"big": 12345678901234, "f": 0.1, "neg": -2.5e-8, "s": "\u0000\u001f\u007f\u2028"}}),
    # globals
    ("range", "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(1, 8, 3) | list }}{{ range(3, -1, -1) | list }}{{ range(0, 3, -1) | list }}", {}),
    ("raise_exception", "{{ raise_exception('bad input') }}", {}),
    ("strftime_now", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j') }}", {}),
    ("dict_global", "{{ dict(a=1, b='x') }}", {}),
    # parse errors
    ("syntax_error_unclosed", "{% if x %}never closed", {}),
    ("syntax_error_unknown_tag", "{% frobnicate %}", {}),
    ("syntax_error_do", "{% do x.append(1) %}", {}),
    ("syntax_error_bad_expression", "{{ 1 + }}", {}),
    ("syntax_error_include", "{% include 'other.jinja' %}", {}),
    ("syntax_error_break_outside_loop", "{% break %}", {}),
]


def render_snippet(text, context):
    try:
        env_template = ctu._compile_jinja_template(text)
    except Exception as e:  # noqa: BLE001 - a syntax error is the expected result
        return {"error": f"{type(e).__name__}: {e}"}
    try:
        return {"output": env_template.render(**context)}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}


def render(template, case):
    messages, tools, add_generation_prompt, kwargs = case
    bos, eos = template["tokens"]
    chat = ctu._normalize_chat_messages(json.loads(json.dumps(messages)))
    try:
        rendered, _ = ctu.render_jinja_template(
            conversations=[chat], tools=tools, chat_template=template["text"],
            add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos, **kwargs)
        return {"output": rendered[0]}
    except Exception as e:  # noqa: BLE001 - any failure is the expected result
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "templates"))
    args = ap.parse_args()
    src = os.path.join(args.data, "src")
    out_dir = os.path.join(args.data, "goldens")
    os.makedirs(out_dir, exist_ok=True)

    cases = [{"name": name, "messages": m, "tools": t, "add_generation_prompt": g, "kwargs": k}
             for name, (m, t, g, k) in CASES.items()]
    with open(os.path.join(args.data, "cases.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump({"now": FIXED_NOW.isoformat(), "default_bos": BOS, "default_eos": EOS, "cases": cases}, f,
                  indent=1, ensure_ascii=False)
        f.write("\n")

    snippets = []
    for name, text, context in SNIPPETS:
        snippets.append({"name": name, "template": text, "context": context, **render_snippet(text, context)})
    with open(os.path.join(args.data, "snippets.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump({"now": FIXED_NOW.isoformat(), "snippets": snippets}, f, indent=1, ensure_ascii=False)
        f.write("\n")

    n_ok = n_err = 0
    for file in sorted(os.listdir(src)):
        if not file.endswith(".jinja"):
            continue
        name = file[: -len(".jinja")]
        with open(os.path.join(src, file), encoding="utf-8", newline="") as f:
            text = f.read()
        template = {"text": text, "tokens": SPECIAL_TOKENS.get(name, (BOS, EOS))}
        results = {}
        for case_name, case in CASES.items():
            results[case_name] = render(template, case)
            if "error" in results[case_name]:
                n_err += 1
            else:
                n_ok += 1
        bos, eos = template["tokens"]
        with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8", newline="\n") as f:
            json.dump({"template": file, "bos_token": bos, "eos_token": eos, "results": results}, f, indent=1,
                      ensure_ascii=False)
            f.write("\n")
    print(f"jinja2 {jinja2.__version__}: {n_ok} renders, {n_err} expected errors -> {out_dir}")


if __name__ == "__main__":
    sys.exit(main())
