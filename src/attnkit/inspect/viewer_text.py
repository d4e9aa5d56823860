"""The words of the interactive viewer (:mod:`attnkit.inspect.viewer`) in each language it speaks.

Every string a reader of the viewer sees — headings, labels, buttons, notes, tooltips, the
diagnostics table's column names and head labels — lives here, once per language, so the page's
skeleton and its script carry no words of their own: the English page has no Chinese and the
Chinese page no English interface text. The script fills the ``{name}`` holes of a template with
:func:`fill`'s rule (``{layer}``, ``{head}``, ...), the same in Python and in JavaScript.

``TEXT[lang]`` holds:
    page:     strings of the HTML skeleton (headings, select labels, ARIA labels, the noscript note)
    script:   templates the script fills at run time (notes, status lines, tooltips)
    columns:  display names of the diagnostics columns (:meth:`HeadSummary.columns`)
    labels:   display names of the head labels (:func:`attnkit.inspect.metrics.classify_heads`)
    phrases:  English phrases of the diagnostics' ``reason`` cells (``"fixed_mass 0.61 < 0.8, entropy ..."``, written by
              :meth:`attnkit.inspect.head_summary.HeadThresholds.label`) and their replacements, longest first
"""

from __future__ import annotations

import re

__all__ = ["LANGS", "TEXT", "fill", "ui_text"]

LANGS = ("en", "zh")

_EN = {
    "page": {
        "html_lang": "en", "noscript": "This viewer needs JavaScript.", "layer": "Layer", "head": "Head",
        "head_view": "Head view", "matrix_view": "Matrix view", "patch_view": "Patch view", "query": "Query",
        "time_series": "Time series", "step": "Step", "diagnostics": "Head diagnostics",
        "diag_note": "Click a row to show that head. Numbers are means over queries; see attnkit.inspect.metrics.",
        "aria_layer": "layer", "aria_head": "head", "aria_lines": "attention lines", "aria_patch_query": "patch query",
        "aria_step": "time step", "aria_series": "series with attention shading", "default_title": "attnkit attention viewer",
        "default_series": "series",
    },
    "script": {
        "layer_option": "layer {layer}", "all_heads": "all heads", "head_option": "head {head}",
        "selection_all": "layer {layer}, mean of all heads", "selection_head": "layer {layer}, head {head}",
        "lines_note": "Line opacity = weight. Showing {shown} of {total} non-zero weights (weights below {min} are not "
                      "drawn{cap}). Hover a query (left) or a key (right).",
        "lines_cap": "; only the {max} strongest",
        "query_name": "query {i} {token}", "key_name": "key {j} {token}", "status": "{name} ({selection})",
        "matrix_note": "{selection}; rows = queries, columns = keys; darkest = {max}.",
        "matrix_info": "query {i} {query} \u2192 key {j} {key}: {weight}",
        "patch_info": "query {i} {token} ({selection}): strongest patch (row {row}, col {col}) {weight}",
        "patch_prefix": "; weight on the {count} prefix token(s): {weight}",
        "patch_click": ". Click a patch to make it the query.", "patch_end": ".",
        "step_tip": "step {j}: {weight}", "step_label": "step {step} {token}",
        "series_info": "{name} ({selection}): step {step} puts most weight on step {arg} ({weight}); shading is "
                       "weight / row max.",
        "subtitle": "{layers} layer(s), {queries} queries \u00d7 {keys} keys. Attention weights show where the softmax "
                    "put its mass; they are not explanations.",
    },
    "columns": {},
    "labels": {},
    "phrases": {},
}

_ZH = {
    "page": {
        "html_lang": "zh-CN", "noscript": "这个查看器需要 JavaScript。", "layer": "层", "head": "头",
        "head_view": "头视图", "matrix_view": "矩阵视图", "patch_view": "图块视图", "query": "查询",
        "time_series": "时间序列", "step": "时间步", "diagnostics": "各头诊断",
        "diag_note": "点击一行即显示那个头。数字是对所有查询取的平均；定义见 attnkit.inspect.metrics。",
        "aria_layer": "层", "aria_head": "头", "aria_lines": "注意力连线", "aria_patch_query": "图块查询",
        "aria_step": "时间步", "aria_series": "带注意力阴影的序列", "default_title": "attnkit 注意力查看器",
        "default_series": "序列",
    },
    "script": {
        "layer_option": "第 {layer} 层", "all_heads": "全部头", "head_option": "头 {head}",
        "selection_all": "第 {layer} 层，全部头的平均", "selection_head": "第 {layer} 层，头 {head}",
        "lines_note": "线的不透明度 = 权重。显示了 {total} 个非零权重中的 {shown} 个（小于 {min} 的权重不画{cap}）。"
                      "把鼠标悬停在左侧的查询或右侧的键上。",
        "lines_cap": "；只画最强的 {max} 条",
        "query_name": "查询 {i} {token}", "key_name": "键 {j} {token}", "status": "{name}（{selection}）",
        "matrix_note": "{selection}；行 = 查询，列 = 键；最深的颜色 = {max}。",
        "matrix_info": "查询 {i} {query} \u2192 键 {j} {key}：{weight}",
        "patch_info": "查询 {i} {token}（{selection}）：权重最大的图块（第 {row} 行，第 {col} 列）{weight}",
        "patch_prefix": "；{count} 个前缀 token 上的权重：{weight}",
        "patch_click": "。点击一个图块，把它设为查询。", "patch_end": "。",
        "step_tip": "时间步 {j}：{weight}", "step_label": "时间步 {step} {token}",
        "series_info": "{name}（{selection}）：时间步 {step} 把最多的权重放在时间步 {arg} 上（{weight}）；"
                       "阴影深浅 = 权重 / 该行最大值。",
        "subtitle": "{layers} 层，{queries} 个查询 \u00d7 {keys} 个键。注意力权重只说明 softmax 把权重放在了哪里，并不是解释。",
    },
    "columns": {
        "layer": "层", "head": "头", "label": "类型", "entropy": "熵", "max_weight": "最大权重", "distance": "平均距离",
        "sink_mass": "首位权重", "previous_mass": "前一个 token", "next_mass": "后一个 token", "self_mass": "自身",
        "fixed_mass": "固定位置权重", "special_mass": "[CLS]/[SEP] 权重", "learned_sink_mass": "可学习汇点权重",
        "fixed_position": "固定位置", "reason": "依据", "importance": "重要性",
    },
    "labels": {
        "dead": "停放型", "uniform": "均匀型", "positional-previous": "看前一个 token", "positional-next": "看后一个 token",
        "positional-self": "看自己", "content": "看内容",
    },
    "phrases": {
        "no valid rows (every row fully masked, or all of its mass on an attention sink)":
            "没有有效的行（每一行都被完全掩码，或全部权重都在注意力汇点上）",
        "(on the attention sink, no key)": "（在注意力汇点上，不在任何键上）",
        "max positional mass": "最大位置权重", "learned_sink_mass": "可学习汇点权重", "special_mass": "[CLS]/[SEP] 权重",
        "previous_mass": "前一个 token 权重", "next_mass": "后一个 token 权重", "self_mass": "自身权重",
        "fixed_mass": "固定位置权重", "entropy": "熵", "on key": "位于键", ", ": "，",
    },
}

TEXT = {"en": _EN, "zh": _ZH}


def ui_text(lang: str) -> dict:
    """The viewer's words in ``lang`` (a key of :data:`TEXT`)."""
    if lang not in TEXT:
        raise ValueError(f"lang must be one of {', '.join(map(repr, LANGS))}; got {lang!r}")
    return TEXT[lang]


def fill(template: str, **values) -> str:
    """``template`` with each ``{name}`` replaced by ``values[name]`` (unknown names are left as they are),
    the rule viewer.js's ``t()`` follows."""
    return re.sub(r"\{(\w+)\}", lambda m: str(values.get(m.group(1), m.group(0))), template)
