"""Screenshot of a running ``hf-atr serve`` page after one query, taken in headless Chromium (how the pictures in
docs/search-page/ were made).

Needs selenium (in the ``[dev]`` extra) and Debian's ``chromium`` and ``chromium-driver``::

    hf-atr serve --model outputs/demo/model --index outputs/realaudio-index --top-k 6 --port 7861 &
    python examples/search_page_screenshot.py http://127.0.0.1:7861/ --text "a dog barks" --out text.png
    python examples/search_page_screenshot.py http://127.0.0.1:7861/ --audio dog.wav --out example.png
    python examples/search_page_screenshot.py http://127.0.0.1:7861/ --moments "a dog barks" --out moments.png
"""

from __future__ import annotations

import argparse
import shutil
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

WIDTH = 1280


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the page's address, as hf-atr serve prints it")
    query = parser.add_mutually_exclusive_group(required=True)
    query.add_argument("--text", help="a text query, typed and sent with Enter")
    query.add_argument("--audio", help="an audio file to upload (query by example)")
    query.add_argument("--moments", help="a text query, typed and sent with the Find moments button")
    parser.add_argument("--out", required=True, help="the PNG to write (the whole page)")
    args = parser.parse_args()

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={WIDTH},1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(args.url)
        wait = WebDriverWait(driver, 120)
        status = (By.CSS_SELECTOR, "#status [data-testid=markdown]")
        before = wait.until(lambda d: d.find_element(*status)).text
        if args.text is not None:
            driver.find_element(By.CSS_SELECTOR, "#query textarea").send_keys(args.text, Keys.ENTER)
        elif args.moments is not None:
            driver.find_element(By.CSS_SELECTOR, "#query textarea").send_keys(args.moments)
            driver.find_element(By.ID, "find-moments").click()
        else:
            driver.find_element(By.CSS_SELECTOR, "#example input[type=file]").send_keys(args.audio)
        wait.until(lambda d: d.find_element(*status).text not in ("", before))
        time.sleep(2)  # the players load their excerpts
        # The window's height includes the browser's own bars: grow it until the viewport holds the whole page.
        page_and_bars = (
            "return document.documentElement.scrollHeight + window.outerHeight - window.innerHeight"
        )
        driver.set_window_size(WIDTH, driver.execute_script(page_and_bars))
        time.sleep(1)
        driver.save_screenshot(args.out)
        print(f"{driver.find_element(*status).text} -> {args.out}")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
