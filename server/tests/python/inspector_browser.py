"""Drives the inspector page (`/`) in Debian's headless Chromium through chromium-driver and
Selenium, against a server the Rust test (server/tests/it/inspector.rs) seeded: gives the
token the page asks for (a wrong one first), picks a user, clicks through every view, asserts
on what each shows, and saves a screenshot of each as inspector-<view>.png in --shots.

Usage: inspector_browser.py --url http://127.0.0.1:PORT --token TOKEN --shots DIR
Prints `inspector: passed` when every check held."""

import argparse
import os
import pathlib
import sys
import tempfile

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import Select, WebDriverWait

CHROMIUM = os.environ.get("AMBERDB_CHROMIUM", "/usr/bin/chromium")
DRIVER = os.environ.get("AMBERDB_CHROMEDRIVER", "/usr/bin/chromedriver")


def browser(profile):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # The flags this machine's probe uses: no sandbox as root, and no background connections
    # (the machine's closed network refuses them).
    for flag in [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--disable-dev-shm-usage", "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)


class Page:
    def __init__(self, driver, url, shots):
        self.d = driver
        self.url = url
        self.shots = pathlib.Path(shots)
        self.wait = WebDriverWait(driver, 20)

    def view(self, name):
        """Waits until the view `name` is shown and returns its section."""
        self.wait.until(ready.presence_of_element_located(
            (By.CSS_SELECTOR, f'section[data-view="{name}"]')))
        return self.d.find_element(By.CSS_SELECTOR, f'section[data-view="{name}"]')

    def go(self, hash_, name):
        self.d.execute_script("location.hash = arguments[0]", hash_)
        self.wait.until(lambda d: d.execute_script(
            "const s = document.querySelector('section[data-view]');"
            "return s && s.dataset.view === arguments[0] && "
            "!document.getElementById('status').textContent.startsWith('loading')", name))
        return self.view(name)

    def click(self, css):
        self.wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, css))).click()

    def text(self, css):
        return self.d.find_element(By.CSS_SELECTOR, css).text

    def all(self, css):
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def shot(self, name):
        path = self.shots / f"inspector-{name}.png"
        self.d.save_screenshot(str(path))
        check(path.stat().st_size > 10_000, f"{path} is a real screenshot")


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"ok: {what}")


def token_is_asked_and_kept(p, token):
    p.d.get(p.url + "/")
    p.wait.until(ready.visibility_of_element_located((By.ID, "token-form")))
    check(p.d.execute_script("return sessionStorage.length") == 0, "no token before one is given")
    p.d.find_element(By.ID, "token-input").send_keys("not-the-token")
    p.click("#token-form button")
    p.wait.until(lambda d: "refused" in d.find_element(By.ID, "token-error").text)
    check(True, "a wrong token is refused and asked again")
    p.d.find_element(By.ID, "token-input").send_keys(token)
    p.click("#token-form button")
    p.view("users")
    check(p.d.execute_script("return document.cookie") == "", "no cookie is set")
    check(p.d.execute_script("return sessionStorage.getItem('amberdb-inspector-token')") == token,
          "the token is kept in sessionStorage")


def users(p):
    section = p.go("#/users", "users")
    ids = [r.get_attribute("data-user") for r in p.all('table[data-testid="users"] tbody tr')]
    check({"ada", "bob"} <= set(ids), f"users ada and bob are listed: {ids}")
    Select(p.d.find_element(By.ID, "user-pick")).select_by_value("ada")
    p.wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'dl[data-testid="user-stats"]'))
    check("ada" in p.text('section[data-view="users"] h3'), "the picked user's counts are shown")
    p.shot("users")
    return section


def sessions(p):
    p.go("#/sessions", "sessions")
    rows = p.all('table[data-testid="sessions"] tbody tr')
    check(any(r.get_attribute("data-session") == "trip" for r in rows), "ada's session trip is listed")
    p.shot("sessions")
    p.click('tr[data-session="trip"] a')
    p.view("memories")
    p.wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'table[data-testid="memories"]'))
    kinds = {r.find_elements(By.TAG_NAME, "td")[1].text
             for r in p.all('table[data-testid="memories"] tbody tr')}
    check(kinds == {"message"}, f"a session opens as its messages: {kinds}")


def memories(p):
    p.go("#/memories", "memories")
    total = p.text('[data-testid="memory-total"]')
    check(total.split()[0].isdigit() and int(total.split()[0]) >= 6, f"ada's records: {total}")
    check(all("archived" not in r.get_attribute("class")
              for r in p.all('table[data-testid="memories"] tbody tr')), "the default lists live records")
    Select(p.d.find_element(By.CSS_SELECTOR, '#memory-filters select[name="kind"]')).select_by_value("memory")
    Select(p.d.find_element(By.CSS_SELECTOR, '#memory-filters select[name="category"]')).select_by_value("tool-usage")
    p.click("#memory-filters button")
    p.wait.until(lambda d: "category=tool-usage" in d.current_url)
    p.view("memories")
    p.wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'table[data-testid="memories"] tbody tr'))
    cats = {r.find_elements(By.TAG_NAME, "td")[2].text for r in p.all('table[data-testid="memories"] tbody tr')}
    check(cats == {"tool-usage"}, f"the category filter holds: {cats}")
    p.go("#/memories?tags=editor", "memories")
    tagged = p.all('table[data-testid="memories"] tbody tr')
    check(tagged and all("editor" in r.find_elements(By.TAG_NAME, "td")[3].text for r in tagged),
          "the tag filter holds")
    p.go("#/memories?valid=false&archived=all", "memories")
    rows = p.all('table[data-testid="memories"] tbody tr')
    check(rows and all("archived" in r.get_attribute("class") for r in rows),
          "records that no longer hold are the archived old values")
    check(any(r.find_elements(By.CSS_SELECTOR, ".decision") for r in rows),
          "an archived value says the decision that archived it")
    p.go("#/memories?archived=archived", "memories")
    only = p.all('table[data-testid="memories"] tbody tr')
    check(only and all("archived" in r.get_attribute("class") for r in only), "archived only")
    p.go("#/memories?archived=all", "memories")
    p.shot("memories")


def memory(p, fact_id):
    p.go(f"#/memory/{fact_id}", "memory")
    versions = p.all('[data-testid="timeline"] li')
    statuses = [v.get_attribute("data-status") for v in versions]
    check(len(versions) >= 2 and statuses[0] == "current" and "replaced" in statuses,
          f"the timeline shows the current value and the one it replaced: {statuses}")
    replaced = [v for v in versions if v.get_attribute("data-status") == "replaced"][0]
    check("decided by" in replaced.text, "the replaced version says the decision and its reason")
    check("open" in versions[0].find_element(By.CSS_SELECTOR, ".validity").text,
          "the current value's validity is open")
    p.shot("memory")
    lineage = p.all('table[data-testid="lineage"] tbody tr')
    check(lineage, "the lineage lists what it replaced")
    archived = lineage[0].get_attribute("data-lineage")
    lineage[0].find_element(By.CSS_SELECTOR, "a").click()
    p.wait.until(lambda d: d.current_url.endswith(f"#/memory/{archived}"))
    p.view("memory")
    check(p.all('[data-testid="timeline"] li'), "an archived record opens with its history")


def search(p):
    p.go("#/search", "search")
    box = p.d.find_element(By.CSS_SELECTOR, '#search-form input[name="q"]')
    box.send_keys("which editor do I use")
    p.d.find_element(By.CSS_SELECTOR, '#search-form input[name="neighbours"]').clear()
    p.d.find_element(By.CSS_SELECTOR, '#search-form input[name="neighbours"]').send_keys("1")
    p.click("#search-form button")
    p.wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="hits"] li.hit'))
    hits = p.all('[data-testid="hits"] li.hit')
    first = hits[0]
    check("editor" in first.find_element(By.CSS_SELECTOR, ".content").text.lower(),
          "the best hit is about the editor")
    check(first.find_element(By.CSS_SELECTOR, ".score").text.startswith("score 0."), "hits show a score")
    check(first.find_element(By.CSS_SELECTOR, ".source").text.startswith("source "), "hits show a source")
    summary = p.text('dl[data-testid="search-summary"]')
    check("hybrid" in summary, f"the mode is shown: {summary!r}")
    folded = [int(h.find_element(By.CSS_SELECTOR, ".folded").text.split()[-1]) for h in hits]
    check(max(folded) >= 1, f"folding is shown: {folded}")
    p.shot("search")
    p.go("#/search?q=flight+to+Lisbon&neighbours=1", "search")
    p.wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="hits"] li.hit'))
    check(p.all("[data-neighbour]"), "a chat turn's session neighbours are shown")


def stats(p):
    p.go("#/stats", "stats")
    store = p.text('dl[data-testid="store"]')
    check("memories" in store and "embedder" in store, "store stats are shown")
    check("checkpoints" in p.text('dl[data-testid="maintenance"]'), "maintenance counters are shown")
    check("keyword index ready" in p.text('dl[data-testid="index"]'), "index state is shown")
    p.shot("stats")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--shots", required=True)
    ap.add_argument("--fact", required=True, type=int, help="a memory whose value was replaced")
    a = ap.parse_args()
    os.environ.setdefault("SE_OFFLINE", "true")
    pathlib.Path(a.shots).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        d = browser(profile)
        try:
            p = Page(d, a.url.rstrip("/"), a.shots)
            token_is_asked_and_kept(p, a.token)
            users(p)
            sessions(p)
            memories(p)
            memory(p, a.fact)
            search(p)
            stats(p)
            errors = [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]
            check(not errors or all("401" in e.get("message", "") for e in errors),
                  f"the console has no errors but the token refusals: {errors}")
        finally:
            d.quit()
    print("inspector: passed")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the Rust test prints what failed
        print(f"inspector: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        raise
