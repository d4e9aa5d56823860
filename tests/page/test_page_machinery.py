"""The page machinery that keeps a learner's page true (issue: figures visible where they teach,
terms defined, run names in words, one significance rule, cells that do not break mid-word):

* a figure too wide to read at the page's width is refused, not shrunk to specks;
* a fold keeps tables and diagnostics, never a figure marked as teaching;
* the glossary wraps the first use of each term per section, leaves code and links alone, and lists
  exactly the terms used;
* a run's folder name is shown in words, in both languages;
* "helped"/"hurt" need 2σ of the seed spread;
* the report renders every section after every section has computed.
"""

from __future__ import annotations

import re

import pytest

from attnkit.page import html as H
from attnkit.page.glossary import TERMS, annotate, glossary_html
from attnkit.page.names import run_name
from attnkit.page.significance import compare


def _png(tmp_path, w_in: float, h_in: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(w_in, h_in))
    path = tmp_path / "f.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def test_png_size_reads_the_header(tmp_path):
    assert H.png_size(_png(tmp_path, 3.0, 2.0).read_bytes()) == (300, 200)
    with pytest.raises(ValueError, match="PNG"):
        H.png_size(b"GIF89a" + b"\0" * 30)


def test_a_strip_too_wide_to_read_is_refused(tmp_path):
    # the seq2seq alignment strip a learner could not read: 2,146 x 397 px, shown 185 px tall
    with pytest.raises(ValueError, match="185 px tall"):
        H.check_readable(2146, 397)
    with pytest.raises(ValueError, match="wide strip"):
        H.png_img(_png(tmp_path, 21.46, 3.97), "strip")
    H.check_readable(1000, 360)  # a normal 10 x 3.6 in figure passes
    assert H.png_img(_png(tmp_path, 10, 3.6), "ok").startswith("<img")


def test_a_fold_keeps_its_tables_but_shows_its_teaching_figures(tmp_path):
    png = _png(tmp_path, 10, 3.6)
    body = "<p>raw</p>" + H.table(["a"], [[1]]) + H.figure(png, "what it shows", "en", teach=True) + H.figure(png, "loss", "en")
    out = H.details("more", body)
    fold, after = out.split("</details>")
    assert "<table>" in fold and 'alt="loss"' in fold and "data-teach" not in fold
    assert 'data-teach="1"' in after and "<figcaption>what it shows</figcaption>" in after
    only = H.details("more", H.figure(png, "x", "en", teach=True))  # nothing left to fold: no empty fold
    assert "<details>" not in only and "<figure" in only


def test_table_cells_do_not_break_words_anywhere():
    assert "anywhere" not in H._CSS and "overflow-wrap:break-word" in H._CSS


def test_the_glossary_defines_the_first_use_per_section_and_skips_code():
    html = "<p>BLEU and chrF; BLEU again.</p><pre>BLEU</pre><code>sdpa</code><a href='#x'>MSE</a><p>η² is high</p>"
    out, found = annotate(html, "en")
    assert found == ["bleu", "chrf", "eta2"]
    assert out.count("<abbr") == 3 and out.count('href="#g-bleu"') == 1
    assert "<pre>BLEU</pre>" in out and "<code>sdpa</code>" in out and "<a href='#x'>MSE</a>" in out
    zh, _ = annotate("<p>BLEU 分数</p>", "zh")
    assert "翻译评分" in zh
    entries = glossary_html(found, "zh")
    assert entries.count("<dfn") == 3 and 'id="g-bleu"' in entries and "chrF" in entries
    assert not annotate("<p>ABLEU, BLEUS, SEP</p>", "en")[1]  # whole words only


def test_every_term_has_both_languages():
    keys = [t.key for t in TERMS]
    assert len(keys) == len(set(keys))
    for t in TERMS:
        assert all(t.name) and all(t.meaning) and re.search(r"[\u4e00-\u9fff]", t.meaning[1]), t.key


@pytest.mark.parametrize("name", ["dates-list-full", "bible-hash-30", "copy-quick", "etth1-in336-full", "vic_elec-full", "full"])
def test_run_names_are_words(name):
    for lang in ("en", "zh"):
        words = run_name(name, lang)
        assert name not in words and not re.search(r"\w-\w", words.replace("336-step", "")), words
    assert f"<code class='run'>{name}</code>" in run_name(name, "en", html=True)
    assert run_name("dates-list-full", "zh") == "日期列表（长时间运行）"


def test_helped_and_hurt_need_two_sigma():
    # a drop of about 1σ over 3 seeds (the vision section once called it "hurt") is no clear difference
    assert compare(-0.026, 0.0286, 0.0128, 3)[0] == "no clear difference"
    assert compare(0.10, 0.01, 0.01, 3) == ("helped", pytest.approx(2 * 2 ** 0.5 * 0.01))
    assert compare(-0.10, 0.01, 0.01, 3)[0] == "hurt"
    assert compare(0.10, 0.0, 0.0, 1)[0] == "one seed"


def test_sections_render_after_every_section_computed(tmp_path):
    """A section may quote one that comes later on the page (head_split quotes the head sweep)."""
    from attnkit.page.story import StorySection
    from attnkit.report.build import write_report

    first = StorySection("first", ("First", "第一"), ("q", "问"), ("r", "读"), lambda ctx: {},
                         lambda d, ctx, lang: f"<p>later says {ctx.data['later']['n']}</p>", cache=False)
    later = StorySection("later", ("Later", "后面"), ("q", "问"), ("r", "读"), lambda ctx: {"n": 42},
                         lambda d, ctx, lang: "<p>ok</p>", cache=False)
    run = write_report(tmp_path, [first, later], size="tiny", log=lambda m: None, bench_results=None, committed_results=None, course=None)
    assert run.failed == [] and "later says 42" in run.path.read_text(encoding="utf-8")
