"""The HTML report, loaded in a real headless Chromium: one self-contained file (no script, no
network, a CSP that forbids loading anything), the verdict, the identity, the causes, and a
timeline with a lane per rank and the first failure marked where it happened - asserted on the
DOM the browser built and on what it laid out; no console error, no request but the file itself.
Screenshots are kept under test-artifacts/html/ (gitignored)."""

from __future__ import annotations

import functools
import io
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from diagnose.app import diagnose
from diagnose.engine.findings import Diagnosis
from diagnose.evidence.bundle import evidence_from_bundle
from diagnose.report.render import Format, reporter
from tests import browser
from tests.conftest import FIXTURES, REPO, run_cli
from tests.report_support import load_rules_cached

CASES = ("nccl-hang-2gpu", "seed-host-oom", "seed-flex7-tmux-died")
ARTIFACTS = REPO / "test-artifacts" / "html"
needs_chromium = pytest.mark.skipif(browser.chromium() is None,
                                    reason="headless Chromium is not installed (apt-get install chromium)")


@functools.cache
def diagnosis_of(case: str) -> Diagnosis:
    return diagnose(evidence_from_bundle(FIXTURES / case), load_rules_cached())


def html_of(case: str) -> str:
    out = io.StringIO()
    reporter(Format.HTML)(diagnosis_of(case), out)
    return out.getvalue()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each fixture's report written by the real CLI (`--format html=FILE`)."""
    folder = tmp_path_factory.mktemp("html")
    written = {}
    for case in CASES:
        target = folder / f"{case}.html"
        result = run_cli([str(FIXTURES / case), "--format", f"html={target}", "--fail-on", "never"])
        assert result.returncode == 0 and result.stdout == "", result.stderr
        written[case] = target
    return written


class _Tree(HTMLParser):
    """Elements as (tag, attributes, text inside) - enough to query a serialised DOM."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str], list[str]]] = []
        self.open: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, []))
        if tag not in ("meta", "br", "rect", "line", "circle", "path", "link", "img", "input"):
            self.open.append(len(self.elements) - 1)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, []))

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            index = self.open.pop()
            if self.elements[index][0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for index in self.open:
            self.elements[index][2].append(data)

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[tuple[str, dict[str, str], str]]:
        out = []
        for name, attributes, text in self.elements:
            if tag is not None and name != tag:
                continue
            if cls is not None and cls not in attributes.get("class", "").split():
                continue
            if any(attributes.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            out.append((name, attributes, "".join(text)))
        return out


def tree(dom: str) -> _Tree:
    parsed = _Tree()
    parsed.feed(dom)
    return parsed


# ---------------------------------------------------------------- the file itself

@pytest.mark.parametrize("case", CASES)
def test_the_report_is_one_file_that_loads_nothing(case: str) -> None:
    page = html_of(case)
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower() and "<link" not in page.lower() and "<iframe" not in page.lower()
    assert not re.search(r"\b(?:src|srcset|poster|data)\s*=", page.replace("data-", ""))
    assert "url(" not in page and "@import" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    # The only addresses are the rules' references, as links a reader may follow (never loaded).
    for address in re.findall(r"https?://[^\s\"'<>]+", page):
        assert f'href="{address}"' in page or address == "http://www.w3.org/2000/svg", address


def test_only_our_own_tags() -> None:
    parsed = tree(html_of("nccl-hang-2gpu"))
    tags = {name for name, _a, _t in parsed.find()}
    assert tags <= {"html", "head", "meta", "title", "style", "body", "main", "header", "div", "h1", "h2", "h3", "h4",
                    "span", "section", "dl", "dt", "dd", "code", "b", "p", "svg", "g", "rect", "text", "line", "circle",
                    "path", "a", "ul", "li", "i", "table", "thead", "tbody", "tr", "th", "td", "article", "ol", "pre",
                    "mark", "details", "summary", "footer", "br"}, tags
    assert "[rank0]:[E1130 05:07:56.342120872 ProcessGroupNCCL.cpp:689]" in html_of("nccl-hang-2gpu")


@needs_chromium
def test_log_text_is_text_in_the_browser(tmp_path: Path) -> None:
    """The hostile folder of tests/test_safety_output.py (rich markup, HTML, escapes in lines and
    file names): the browser shows the HTML of a log line as text, never as elements."""
    from tests.test_safety_output import MARKUP, _write

    folder = tmp_path / "hostile"
    _write(folder, twin=False)
    target = tmp_path / "hostile.html"
    result = run_cli(["scan", "logs", "--format", f"html={target}", "--fail-on", "never"], cwd=folder)
    assert result.returncode == 0, result.stderr
    dom = tree(browser.dump_dom(target))
    lines = [text for _t, _a, text in dom.find("pre", "line")]
    assert any(MARKUP in text for text in lines), lines  # "<b>&amp;</b>" shown as it was printed
    assert not [e for e in dom.elements if e[0] == "b" and "".join(e[2]).strip() == "&"]  # the line's <b> not made bold
    assert not dom.find("img") and not dom.find("script")


# ---------------------------------------------------------------- in the browser

@pytest.fixture(scope="module")
def doms(pages: dict[str, Path]) -> dict[str, _Tree]:
    if browser.chromium() is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    return {case: tree(browser.dump_dom(path)) for case, path in pages.items()}


@needs_chromium
def test_nccl_hang_has_a_lane_per_rank_and_the_first_failure_on_rank_0(doms: dict[str, _Tree]) -> None:
    dom = doms["nccl-hang-2gpu"]
    lanes = {a["data-lane"]: a for _t, a, _x in dom.find("g", "lane")}
    assert {"rank 0", "rank 1"} <= set(lanes) and "launcher" in lanes
    assert "blamed" in lanes["rank 1"]["class"].split()  # the top cause: rank 1 hung
    assert "blamed" not in lanes["rank 0"]["class"].split()
    first = dom.find("g", id="first-failure")
    assert len(first) == 1
    assert first[0][1]["data-lane"] == "rank 0" and first[0][1]["data-kind"] == "timeout"  # its watchdog fired first
    timeouts = dom.find("g", "kind-timeout")
    assert [a["data-lane"] for _t, a, _x in timeouts] == ["rank 0"]
    exits = {a["data-lane"] for _t, a, _x in dom.find("g", "kind-exit")}
    assert {"rank 0", "rank 1"} <= exits  # torchelastic's summary: SIGABRT, then SIGTERM
    last_lines = {a["data-lane"]: float(a["data-time"]) for _t, a, _x in dom.find("g", "kind-last-line")}
    assert last_lines["rank 1"] < float(first[0][1]["data-time"]) < last_lines["rank 0"]  # rank 1 went quiet first
    rows = {a["data-lane"]: text for _t, a, text in dom.find("tr")if "data-lane" in a}
    assert "behind (hung)" in rows["rank 1"] and "SIGTERM" in rows["rank 1"]
    assert "first failure" in rows["rank 0"] and "watchdog timeout" in rows["rank 0"]
    verdict = dom.find("header", id="verdict")[0][2]
    assert "(distributed.hung-rank)" in verdict and "5 more causes below" in verdict
    causes = [a["data-cause"] for _t, a, _x in dom.find("article", "cause")]
    assert causes[:2] == ["distributed.hung-rank", "nccl.watchdog-timeout"]
    marks = dom.find("mark")
    assert any(text.startswith("Watchdog caught collective operation timeout") for _t, _a, text in marks)


@needs_chromium
def test_host_oom_places_the_kill_on_the_kernel_lane_as_the_first_failure(doms: dict[str, _Tree]) -> None:
    dom = doms["seed-host-oom"]
    lanes = [a["data-lane"] for _t, a, _x in dom.find("g", "lane")]
    assert lanes == ["main", "kernel"]
    first = dom.find("g", id="first-failure")[0][1]
    assert first["data-lane"] == "kernel" and first["data-kind"] == "oom-kill"
    kills = dom.find("g", "kind-oom-kill")
    assert len(kills) == 1 and "not-own" not in kills[0][1]["class"]  # the run's own victim (pid 6139)
    assert "python3 pid 6139 was OOM-killed" in kills[0][2]
    assert "relaunch after the fix" in dom.find("header", id="verdict")[0][2]
    checked = [text for _t, _a, text in dom.find("section", id="checked")]
    assert checked and "no GPU Xid error" in checked[0]


@needs_chromium
def test_a_launch_that_never_started_says_so_without_a_timeline(doms: dict[str, _Tree]) -> None:
    dom = doms["seed-flex7-tmux-died"]
    assert not dom.find("svg") and not dom.find("g", "lane")
    assert "never started" in dom.find("section", id="timeline")[0][2]
    header = dom.find("header", id="verdict")[0][2]
    assert "flex7: the launch never started (launch.tmux-server-died)" in header
    assert "never started" in next(t for _n, _a, t in dom.find("span", "badge"))
    identity = dom.find("section", id="identity")[0][2]
    assert "/workspace/train_flex7.log" in identity and "missing" in identity and "stale socket" in identity
    assert dom.find("article", "cause")[0][1]["data-cause"] == "launch.tmux-server-died"


GEOMETRY = """(() => {
  const svg = document.querySelector('#timeline-svg');
  const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const out = {scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
               title: document.title, verdict: document.querySelector('#verdict h1').textContent};
  if (svg) {
    out.svg = box(svg);
    out.lanes = [...svg.querySelectorAll('g.lane')].map(g => ({lane: g.dataset.lane, box: box(g.querySelector('.lane-bg')),
      label: box(g.querySelector('.lane-label')), marks: [...g.querySelectorAll('g.mark')].map(m => box(m))}));
    const first = svg.querySelector('#first-failure line');
    out.first = first ? box(first) : null;
    const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    out.plotLeft = svg.getBoundingClientRect().left + Number(svg.dataset.plotLeft) * scale;
  }
  return out;
})()"""


@needs_chromium
def test_in_the_browser_no_error_no_request_and_the_timeline_is_laid_out(pages: dict[str, Path]) -> None:
    with browser.devtools(1400, 1000) as page:
        for case, path in pages.items():
            url = path.resolve().as_uri()
            page.open(url)
            assert page.problems() == [], case
            assert set(page.requests()) <= {url}, (case, page.requests())
            shape: dict[str, Any] = page.evaluate(GEOMETRY)
            assert shape["scrollWidth"] <= shape["innerWidth"], (case, "the page scrolls sideways")
            assert shape["verdict"].startswith(diagnosis_of(case).evidence.run.id + ":")
            if case == "seed-flex7-tmux-died":
                assert "svg" not in shape
            else:
                left, top, right, bottom = shape["svg"]
                assert right - left > 1000  # the timeline takes the page's width
                for lane in shape["lanes"]:
                    assert lane["label"][2] < shape["plotLeft"], lane  # the label stays in its column
                    for mark in lane["marks"]:  # every mark inside its lane's row and inside the plot
                        assert lane["box"][1] - 1 <= mark[1] and mark[3] <= lane["box"][3] + 1, (case, lane["lane"])
                        assert left <= mark[0] and mark[2] <= right, (case, lane["lane"])
                first = shape["first"]
                assert first is not None and left < first[0] < right and top < first[1] < first[3] <= bottom
            page.screenshot(ARTIFACTS / f"{case}.png")
            assert (ARTIFACTS / f"{case}.png").stat().st_size > 10_000


@needs_chromium
def test_the_harness_sees_a_request_and_a_console_error(pages: dict[str, Path], tmp_path: Path) -> None:
    """The checks above could fail: a page that asks for an image (blocked by the report's CSP)
    and one without the CSP that writes to the console are both caught."""
    blocked = tmp_path / "blocked.html"
    blocked.write_text(pages["seed-host-oom"].read_text().replace("</main>", '<img src="http://127.0.0.1:9/x.png"></main>'))
    loud = tmp_path / "loud.html"
    loud.write_text("<!DOCTYPE html><title>t</title><img src='http://127.0.0.1:9/y.png'>"
                    "<script>console.error('boom')</script>")
    with browser.devtools() as page:
        page.open(blocked.as_uri())
        assert any("Content Security Policy" in p for p in page.problems()), page.problems()
        assert "http://127.0.0.1:9/x.png" in page.requests()  # asked for, and caught by the check above
        assert page.blocked() == {"http://127.0.0.1:9/x.png": "csp"}  # the report's CSP stopped it before the network
        page.open(loud.as_uri())
        assert "http://127.0.0.1:9/y.png" in page.requests()
        assert any("boom" in p for p in page.problems())


@needs_chromium
def test_a_screenshot_from_the_command_line(pages: dict[str, Path]) -> None:
    target = ARTIFACTS / "nccl-hang-2gpu-window.png"
    browser.screenshot(pages["nccl-hang-2gpu"], target, 1400, 1000)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
