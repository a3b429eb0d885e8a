//! Debian's chromium, headless, driven through chromedriver by WebDriver (fantoccini):
//! what the dashboard's tests and its benchmark look at the page with.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::emulators::free_tcp_port;

/// Headless chromium under chromedriver, each in the process group chromedriver leads:
/// dropping it ends the session and kills the group (no browser outlives its test).
pub struct Browser {
    driver: Child,
    client: Option<Client>,
    runtime: tokio::runtime::Runtime,
}

impl Browser {
    pub fn start() -> Browser {
        use std::os::unix::process::CommandExt;
        let port = free_tcp_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Debian's chromium-driver (.ci/run installs it)");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut browser = Browser {
            driver,
            client: None,
            runtime,
        };
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                // Root in CI: chromium's sandbox needs a user namespace it may not have.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1500,900"],
            }
        });
        let capabilities = capabilities.as_object().unwrap().clone();
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            let connected = browser.runtime.block_on(
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(capabilities.clone())
                    .connect(&format!("http://127.0.0.1:{port}")),
            );
            match connected {
                Ok(client) => break client,
                Err(e) if Instant::now() > deadline => {
                    panic!("chromedriver did not start a session: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        browser.client = Some(client);
        browser
    }

    fn client(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    pub fn goto(&self, url: &str) {
        self.runtime.block_on(self.client().goto(url)).unwrap();
    }

    /// A script's value in the page (`return …;`).
    pub fn eval(&self, script: &str) -> Value {
        self.runtime
            .block_on(self.client().execute(script, vec![]))
            .unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// An asynchronous script's value: it calls `arguments[0]` with it.
    pub fn eval_async(&self, script: &str) -> Value {
        self.runtime
            .block_on(self.client().execute_async(script, vec![]))
            .unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// Polls `script` until it returns something truthy (within `secs`); that value.
    pub fn wait_for(&self, what: &str, secs: u64, script: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let value = self.eval(script);
            if !matches!(value, Value::Null | Value::Bool(false)) && value != json!("") {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {what}; it shows:\n{}",
                self.eval("return document.body.innerText;")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn click(&self, css: &str) {
        self.runtime
            .block_on(async {
                let element = self.client().wait().for_element(Locator::Css(css)).await?;
                element.click().await
            })
            .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
    }

    pub fn type_into(&self, css: &str, text: &str) {
        self.runtime
            .block_on(async {
                let element = self.client().find(Locator::Css(css)).await?;
                element.send_keys(text).await
            })
            .unwrap_or_else(|e| panic!("typing into {css}: {e}"));
    }

    /// Replaces the text of a field as a user does, by keys (select all, delete, type), so
    /// the page's input events fire: setting `value` from a script leaves a controlled
    /// field's state as it was, and the next render writes the old text back.
    pub fn replace_text(&self, css: &str, text: &str) {
        let keys = format!(
            "{}a{}{}{text}",
            char::from(Key::Control),
            char::from(Key::Null),
            char::from(Key::Backspace)
        );
        self.type_into(css, &keys);
    }

    /// Saves a screenshot of the window (a PNG) at `path`.
    pub fn screenshot(&self, path: &Path) {
        let png = self.runtime.block_on(self.client().screenshot()).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.close());
        }
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.driver.wait();
    }
}
