"""Drives the gateway's admin page in a real headless Chromium (Debian's chromium and
chromium-driver, through Selenium from PyPI), as GatewayAdminPageTests asks.

    admin_page_chromium.py ADMIN_URL USER PASSWORD REQUEST_ID DEVICE_ID SCREENSHOT

1. Without credentials the page shows nothing of the gateway (401).
2. With the operator's Basic credentials (sent by the browser as after its login prompt) it
   shows readiness, the request in doubt (its device-made ID shown as text, never markup), the scopes and the
   device; the request's "Mark applied" button is pressed, and the page it comes back to names
   the decision and shows the request as applied.
3. A page of another origin (another port), in the same browser holding the credentials, posts
   the resolve form to the admin port for a second time with the other decision: refused.
4. A screenshot of the page is written to SCREENSHOT.

Prints one line per check (`ok …`), and exits 1 at the first failure with what was seen.
"""

import base64
import http.server
import sys
import threading
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


START = time.time()


def step(message):
    print(f"ok {message} ({time.time() - START:.1f} s)", flush=True)


def fail(message, driver=None):
    print("FAIL " + message)
    if driver is not None:
        print(driver.page_source[:4000])
        driver.quit()
    sys.exit(1)


def main():
    admin, user, password, request_id, device_id, screenshot = sys.argv[1:7]
    options = webdriver.ChromeOptions()
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000",
                     "--disable-gpu", "--no-first-run"]:
        options.add_argument(argument)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    driver.set_page_load_timeout(30)

    # 1. Anonymous: the browser is asked to log in and sees nothing of the gateway.
    driver.get(admin + "/")
    text = driver.find_element(By.TAG_NAME, "body").text
    if request_id in text or "Requests in doubt" in text:
        fail("the page showed the gateway's state without credentials", driver)
    step("anonymous: nothing shown")

    # 2. The operator: the browser sends the Basic credentials with every request of the tab.
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": "Basic " + token}})
    driver.get(admin + "/")
    if "oodata gateway" not in driver.title:
        fail("the page's title is " + repr(driver.title), driver)
    readiness = driver.find_element(By.ID, "readiness").text
    if readiness != "ready":
        fail("readiness reads " + repr(readiness), driver)
    rows = driver.find_elements(By.CSS_SELECTOR, f'#in-doubt tr[data-request="{request_id}"]')
    if len(rows) != 1:
        fail(f"{len(rows)} rows for request {request_id} in the in-doubt table", driver)
    cells = rows[0].find_elements(By.TAG_NAME, "td")
    if cells[0].text != request_id:
        fail("the request ID reads " + repr(cells[0].text) + " (the device's markup must show as text)", driver)
    if not cells[1].text.startswith("POST ") or "Contacts" not in cells[1].text:
        fail("the request line reads " + repr(cells[1].text), driver)
    if driver.find_elements(By.CSS_SELECTOR, "#in-doubt b"):
        fail("the device's markup became an element", driver)
    scopes = [cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "#scopes tr td:nth-child(2)")]
    if not any("Contacts" in scope for scope in scopes):
        fail("no Contacts scope in " + repr(scopes), driver)
    devices = driver.find_element(By.ID, "devices").text
    if device_id not in devices:
        fail("the device " + device_id + " is not listed: " + devices, driver)
    step("operator: readiness, the request in doubt, scopes and the device shown")

    rows[0].find_element(By.CSS_SELECTOR, 'button[value="applied"]').click()
    deadline = time.time() + 20
    while time.time() < deadline and not driver.find_elements(By.ID, "notice"):
        time.sleep(0.1)
    notices = driver.find_elements(By.ID, "notice")
    if not notices or "Marked applied" not in notices[0].text or request_id not in notices[0].text:
        fail("after the click the notice reads " + repr(notices[0].text if notices else None), driver)
    row = driver.find_element(By.CSS_SELECTOR, f'#in-doubt tr[data-request="{request_id}"]')
    resolution = row.find_element(By.CLASS_NAME, "resolution").text
    if resolution != "applied":
        fail("after the click the resolution reads " + repr(resolution), driver)
    if row.find_elements(By.TAG_NAME, "button"):
        fail("a decided request still has its buttons", driver)
    step("clicked: the page names the decision and shows the request applied")
    driver.save_screenshot(screenshot)
    step("screenshot " + screenshot)

    # 3. Another site's page in the same browser (it holds the credentials) posts the form with
    # the other decision: the admin port refuses it.
    page = f"""<!doctype html><form id="f" method="post" action="{admin}/ui/requests/resolve">
<input name="backend" value="x"><input name="requestID" value="{request_id}">
<input name="decision" value="notApplied"></form><script>document.getElementById('f').submit()</script>"""

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page.encode())

        def log_message(self, *arguments):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver.get(f"http://127.0.0.1:{server.server_address[1]}/")
    deadline = time.time() + 10
    while time.time() < deadline and not driver.current_url.startswith(admin):
        time.sleep(0.1)
    body = driver.find_element(By.TAG_NAME, "body").text
    if "admin page itself" not in body:
        fail("another site's form was not refused: " + repr(body[:300]), driver)
    server.shutdown()
    step("another site's form refused")
    driver.quit()


if __name__ == "__main__":
    main()
