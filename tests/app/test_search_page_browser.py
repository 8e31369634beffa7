"""``hf-atr serve`` as a person uses it: the command started as a process, the page driven in headless Chromium
(Debian's ``chromium`` and ``chromium-driver``; skipped where they are not installed)."""

from __future__ import annotations

import io
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import soundfile
from sound_library import EVENT_AT, LONG_RECORDING

pytest.importorskip("gradio")
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.numerics,
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="needs Chromium and its driver (Debian: apt-get install chromium chromium-driver)",
    ),
]
TOP_K = 4
"""More slots than the library has files: the fourth stays hidden."""
SPAN = re.compile(r"· (\d+\.\d+)–(\d+\.\d+) s ·")


@pytest.fixture(scope="module")
def served(library):
    """``hf-atr serve`` on the first free port it finds (a port chosen here and passed on could be taken by a
    parallel test worker in between); yields its URL, then stops it with Ctrl-C (SIGINT)."""
    command = [sys.executable, "-m", "hf_atr.cli", "serve", "--model", str(library.model_dir), "--index",
               str(library.index_dir), "--top-k", str(TOP_K)]  # fmt: skip
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    printed = []
    while not any(line.startswith("Search page for ") for line in printed):
        try:
            printed.append(lines.get(timeout=240))
        except queue.Empty:
            process.kill()
            pytest.fail(f"hf-atr serve printed no URL in 240 s: {''.join(printed)}")
    served_at = re.fullmatch(
        rf"Search page for {re.escape(str(library.index_dir))}: (http://127\.0\.0\.1:\d+/) \(Ctrl-C to stop\)\n",
        printed[-1],
    )
    assert served_at, printed[-1]
    yield served_at.group(1)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    arguments = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1400",
                 "--autoplay-policy=no-user-gesture-required")  # fmt: skip
    for argument in arguments:
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


PAGE_PARTS = (
    "#query textarea",
    "#search",
    "#find-moments",
    "#status [data-testid=markdown]",
    "#example input[type=file]",
)
"""What the tests touch on a fresh page: gradio draws its components one by one, so each is waited for."""


def open_page(driver, url: str):
    """Load the page and wait until every part in :data:`PAGE_PARTS` is drawn (on CI's Chromium the example upload
    came after the text box); returns the text box."""
    driver.get(url)
    WebDriverWait(driver, 120).until(
        lambda d: all(d.find_elements(By.CSS_SELECTOR, css) for css in PAGE_PARTS)
    )
    return driver.find_element(By.CSS_SELECTOR, "#query textarea")


def status_text(driver) -> str:
    """The status line's text, without gradio's progress tracker."""
    return driver.find_element(By.CSS_SELECTOR, "#status [data-testid=markdown]").text


def status_after(driver, action) -> str:
    """The status line once ``action`` has led to an answer (results or a message; while the query runs, gradio
    shows its timer over the old line)."""

    def answered(driver) -> str | None:
        text = status_text(driver)
        return text if text != before and (" for " in text or text.startswith("⚠")) else None

    before = status_text(driver)
    action()
    return WebDriverWait(driver, 120).until(answered)


def shown_results(driver) -> list[tuple[str, float, float, str, float]]:
    """``(line, span start, span end, player URL, player duration)`` of each result shown (its line's white space
    as single spaces), once every player holds its result's excerpt (named by its span) and has loaded it."""

    def loaded(driver) -> list | None:
        shown = []
        for row in driver.find_elements(By.CSS_SELECTOR, ".result"):
            if not row.is_displayed():
                continue
            line = " ".join(row.find_element(By.CSS_SELECTOR, ".result-line").text.split())
            start, end = (float(value) for value in SPAN.search(line).groups())
            player = row.find_element(By.TAG_NAME, "audio")
            source = player.get_attribute("src") or ""
            if (
                f"_{start:.2f}-{end:.2f}s_" not in source
                or driver.execute_script("return arguments[0].readyState", player) < 1
            ):
                return None
            shown.append(
                (line, start, end, source, driver.execute_script("return arguments[0].duration", player))
            )
        return shown

    return WebDriverWait(driver, 60).until(loaded)


def test_search_by_text_and_by_example_and_listen(library, served, browser, tmp_path):
    query_box = open_page(browser, served)
    assert "3 file(s) in" in browser.find_element(By.TAG_NAME, "h2").find_element(By.XPATH, "..").text

    status = status_after(browser, lambda: query_box.send_keys("a siren wails", Keys.ENTER))
    assert re.fullmatch(r"3 files for “a siren wails” \(\d+\.\d\d s\)", status)
    results = shown_results(browser)
    assert [line.split(" ")[0] for line, *_ in results] == ["1.", "2.", "3."]
    for _, start, end, _, duration in results:
        assert duration == pytest.approx(end - start, abs=0.01)  # the player holds the span, from its start
    first_player = browser.find_element(By.CSS_SELECTOR, "#result-1 audio")
    browser.execute_script("arguments[0].play()", first_player)
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return arguments[0].currentTime > 0", first_player)
    )

    status = status_after(
        browser,
        lambda: browser.find_element(By.CSS_SELECTOR, "#example input[type=file]").send_keys(
            str(library.query)
        ),
    )
    assert status.startswith("3 files for sounds like query.wav")
    line, start, end, source, _ = shown_results(browser)[0]
    assert line.startswith(f"1. {LONG_RECORDING} · ") and start <= EVENT_AT <= end
    with urllib.request.urlopen(source, timeout=30) as response:  # what the browser plays
        played, rate = soundfile.read(io.BytesIO(response.read()), dtype="float32")
    stored, _ = soundfile.read(library.audio_dir / LONG_RECORDING, dtype="float32")
    # The page shows the span to 10 ms: the excerpt is the stored audio from within 5 ms of the shown start.
    starts = range(round((start - 0.005) * rate), round((start + 0.005) * rate) + 1)
    assert any(np.allclose(played, stored[first : first + len(played)], atol=1 / 32768) for first in starts)


def test_errors_appear_on_the_page(served, browser, tmp_path):
    query_box = open_page(browser, served)
    notes = Path(tmp_path / "notes.wav")
    notes.write_text("not audio")
    upload = browser.find_element(By.CSS_SELECTOR, "#example input[type=file]")
    status = status_after(browser, lambda: upload.send_keys(str(notes)))
    assert status.startswith("⚠ notes.wav cannot be used as a query: the audio is unreadable or corrupt")
    assert not any(row.is_displayed() for row in browser.find_elements(By.CSS_SELECTOR, ".result"))
    assert "Traceback" not in browser.page_source

    query_box.send_keys("   ")
    status = status_after(browser, lambda: browser.find_element(By.ID, "search").click())
    assert status.startswith("⚠ The text query is empty: describe the sound you are looking for")


def test_find_moments_shows_each_on_its_files_waveform_strip_with_a_player_at_the_moment(
    library, served, browser
):
    query_box = open_page(browser, served)
    query_box.send_keys("a siren wails")
    status = status_after(browser, lambda: browser.find_element(By.ID, "find-moments").click())
    assert re.fullmatch(rf"{TOP_K} moments for “a siren wails” \(\d+\.\d\d s\)", status)
    results = shown_results(browser)
    assert len(results) == TOP_K
    for row, (_, start, end, _, duration) in zip(browser.find_elements(By.CSS_SELECTOR, ".result"), results):
        assert duration == pytest.approx(end - start, abs=0.01)  # the player holds the moment, from its start
        strip = row.find_element(By.CSS_SELECTOR, "svg.waveform-strip")
        span = strip.find_element(By.CSS_SELECTOR, "rect.moment-span")
        assert strip.is_displayed() and span.is_displayed()
        line = " ".join(row.find_element(By.CSS_SELECTOR, ".result-line").text.split())
        name = line.split(" · ")[0].removeprefix(f"{line.split(' ')[0]} ")
        recording = soundfile.info(library.audio_dir / name).duration
        # where the browser draws the moment on the strip: its share of the strip is its share of the recording
        box = browser.execute_script(
            "const s = arguments[0].getBoundingClientRect(), m = arguments[1].getBoundingClientRect();"
            "return [(m.left - s.left) / s.width, m.width / s.width];",
            strip,
            span,
        )
        assert box[0] == pytest.approx(start / recording, abs=0.01)
        assert box[1] == pytest.approx(max(end - start, 2 * recording / 600) / recording, abs=0.01)
    first_player = browser.find_element(By.CSS_SELECTOR, "#result-1 audio")
    browser.execute_script("arguments[0].play()", first_player)
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return arguments[0].currentTime > 0", first_player)
    )


def test_the_moment_timeline_figure_shows_in_the_browser(browser, tmp_path):
    from hf_atr.plots.canvas import save_figure
    from hf_atr.plots.moments import MomentTimeline, moment_timeline_figure

    times = np.arange(0.5, 30.0, 1.0)
    timeline = MomentTimeline(
        "a siren wails", times, np.exp(-((times - 20.5) ** 2)), [(20.0, 21.0, 0.9)], [(20.2, 20.7)]
    )
    save_figure(moment_timeline_figure([timeline]), tmp_path / "timeline.png")
    (tmp_path / "report.html").write_text('<html><body><img id="timeline" src="timeline.png"></body></html>')
    browser.get((tmp_path / "report.html").as_uri())
    size = WebDriverWait(browser, 30).until(
        lambda d: d.execute_script(
            "const i = document.getElementById('timeline'); return i.complete && i.naturalWidth ? "
            "[i.naturalWidth, i.naturalHeight] : null;"
        )
    )
    assert size == [1000, 280]
