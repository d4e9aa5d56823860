"""``roadmap``: the report's closing section, a path through what to run next.

Each step pairs a question with the course lesson that builds the idea by hand and the experiment
that measures it, and gives both commands. The run checks every step against the package and the
course folder: each experiment name must be registered (a folder that fails to import is reported
as missing, not listed as runnable) and each lesson file must exist in both languages, so the page
never tells a reader to run something that is not there. Nothing is trained; instant.
"""

from __future__ import annotations

from pathlib import Path

from ...page.html import esc, so_what
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, get, register
from ..lab.results import Section

# (question (en, zh), lesson file stem or "", experiment name or "", extra command or "")
STEPS = [
    (("What does an attention layer compute, and how are scores made?", "注意力层计算什么？分数是怎么得到的？"),
     "02_scores_and_alignment", "scoring", ""),
    (("How do heads split the width, and why is there W_o?", "多个头如何切分宽度？为什么需要 W_o？"),
     "03_multihead_by_hand", "head_split", ""),
    (("Which keys may a query see, and how should a mask be applied?", "查询可以看到哪些键？掩码该怎么加？"),
     "04_masks", "masking_pitfall", ""),
    (("What do residuals, layer norm and positions each contribute?", "残差、层归一化与位置编码各贡献了什么？"),
     "05_transformer_block", "transformer_block", ""),
    (("Can attention be cheaper than O(n²)?", "注意力能比 O(n²) 更便宜吗？"),
     "07_linear_attention", "linear_kernel", ""),
    (("Why do models park attention on the first token, and what does packing save?", "为什么模型把注意力停在第一个 token 上？打包能省下什么？"),
     "12_sinks_and_packing", "", ""),
    (("How does MLA cache 71× less than multi-head attention and still decode exactly? What do gated and differential attention change?",
      "MLA 为什么比多头注意力少存 71 倍缓存还能精确解码？门控注意力与差分注意力改变了什么？"),
     "13_latent_gated_differential", "", ""),
    (("Does attention help a real translation model, and by how much?", "注意力对真实的翻译模型有帮助吗？有多大？"),
     "", "seq2seq", ""),
    (("Do more heads help? Are attention weights explanations?", "头越多越好吗？注意力权重是解释吗？"),
     "", "misconceptions_heads", "attnkit experiment misconceptions_explain"),
    (("Everything at once, with the long runs quoted by the page", "一次运行全部内容，并引用页面所用的长时间运行"),
     "", "", "attnkit report --out report/"),
]


def course_folder() -> Path | None:
    """docs/course of a source checkout (three folders above the package), or of the current folder."""
    for base in (Path(__file__).resolve().parents[4], Path.cwd()):
        if (base / "docs" / "course" / "en").is_dir():
            return base / "docs" / "course"
    return None


def check_steps() -> list[dict]:
    """Every step with its commands and whether what it names is present here."""
    course = course_folder()
    rows = []
    for question, lesson, exp, extra in STEPS:
        row = {"question": list(question), "lesson": lesson, "experiment": exp, "extra": extra, "commands": []}
        if lesson:
            row["lesson_found"] = course is not None and all((course / lang / f"{lesson}.py").is_file() for lang in ("en", "zh"))
            row["commands"].append(f"python docs/course/en/{lesson}.py")
        if exp:
            row["experiment_found"] = _registered(exp)
            row["commands"].append(f"attnkit experiment {exp}")
        if extra:
            row["commands"].append(extra)
        rows.append(row)
    return rows


def _registered(name: str) -> bool:
    try:
        get(name)
    except ValueError:  # an unknown name or a folder that fails to import: not runnable here
        return False
    return True


@register
class Roadmap(Experiment):
    name = "roadmap"
    help = "the report's closing section: which lessons and experiments to run next, checked to exist"
    quick = {}
    full = {}
    tiny = {}
    seeds = 1
    title = ("Where to go next", "接下来做什么")
    question = ("Which lessons and experiments should a reader run next, and with which commands?",
                "读者接下来应该运行哪些课程与实验？用什么命令？")
    how_to_read = ("One row per step, in the order to take them: the question, then the commands to run (lesson first, then the experiment).",
                   "每步一行，按建议的顺序：先是问题，然后是要运行的命令（先课程，后实验）。")
    report_order = 990
    lesson = "01_attention_from_scratch"  # the course's first lesson: where the path starts
    est_s = {"quick": 0.5, "tiny": 0.5}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        rows = check_steps()
        return {"steps": rows, "course_found": course_folder() is not None}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        steps = results["steps"]
        body = []
        for i, s in enumerate(steps, 1):
            missing = [n for n, ok in ((s["lesson"], s.get("lesson_found", True)), (s["experiment"], s.get("experiment_found", True))) if not ok]
            cmds = "<br>".join(f"<code>{esc(c)}</code>" for c in s["commands"])
            note = (" <span class='note'>" + esc(tr(lang, "not available here: ", "此处不可用：") + ", ".join(missing)) + "</span>") if missing else ""
            body.append([i, esc(tr(lang, *s["question"])), cmds + note])
        text = tr(lang,
                  "Every section above comes from code you can run. Each lesson builds one idea by hand in a script that checks itself "
                  "against attnkit and PyTorch; each experiment measures it and writes results.json and its figures under runs/. "
                  "Start with the scoring and heads steps, and change one number at a time with --set (for example "
                  "<code>attnkit experiment scoring --set dims=[16,4096]</code>).",
                  "上面每一节都来自可以运行的代码。每一课在一个脚本里亲手搭出一个想法，并与 attnkit 和 PyTorch 核对；"
                  "每个实验则测量它，把 results.json 与图写到 runs/ 下。从打分与多头两步开始，用 --set 每次只改一个数"
                  "（例如 <code>attnkit experiment scoring --set dims=[16,4096]</code>）。")
        html = f"<p>{text}</p>" + _raw_table(lang, body)
        html += so_what(lang, tr(lang, "Reading about attention is not the same as measuring it: each row is a question you can answer on a laptop in "
                                       "seconds to minutes, and every number on this page can be regenerated the same way.",
                                 "读过关于注意力的文章，不等于亲手测量过它：每一行都是一个能在笔记本电脑上用几秒到几分钟回答的问题，本页的每个数字也都能这样重新生成。"))
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        steps = results["steps"]
        ok = sum(1 for s in steps if s.get("lesson_found", True) and s.get("experiment_found", True))
        return (tr(lang, f"{ok} of {len(steps)} next steps runnable here", f"{len(steps)} 个后续步骤中有 {ok} 个可在此运行"),
                tr(lang, "every number here can be re-run", "这里的每个数字都能重新运行得到"))


def _raw_table(lang: str, rows: list[list]) -> str:
    """A table whose cells are already HTML (the commands carry <code> tags)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in (tr(lang, "step", "步骤"), tr(lang, "question", "问题"), tr(lang, "commands", "命令")))
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
