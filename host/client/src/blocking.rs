//! [`crate::Client`] for code without a runtime (the CLI, blocking tests): each call runs
//! on a current-thread runtime of its own, as mini-redis's blocking client does.

use deployd_wire::documents::{HistoryEvent, Node};
use deployd_wire::targets::{PowerTarget, ProvisionTarget};
use serde_json::{Map, Value};

use crate::{Answer, ClientError, Method, Payload};

pub struct Client {
    inner: crate::Client,
    runtime: tokio::runtime::Runtime,
}

impl Client {
    pub fn new(inner: crate::Client) -> Client {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
        Client { inner, runtime }
    }

    /// Any answer, refusals included (see [`crate::Client::answer`]).
    pub fn answer<'a>(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Payload<'a>>,
    ) -> Result<Answer, ClientError> {
        self.runtime.block_on(self.inner.answer(method, path, body))
    }

    /// A successful answer's body, or the refusal as an error.
    pub fn call<'a>(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Payload<'a>>,
    ) -> Result<Value, ClientError> {
        self.answer(method, path, body)?.into_result()
    }

    pub fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.call(Method::GET, path, Payload::None)
    }

    pub fn node(&self, ident: &str) -> Result<Node, ClientError> {
        self.runtime.block_on(self.inner.node(ident))
    }

    pub fn history(&self, ident: &str) -> Result<Vec<HistoryEvent>, ClientError> {
        self.runtime.block_on(self.inner.history(ident))
    }

    pub fn nodes(&self) -> Result<Vec<Node>, ClientError> {
        self.runtime.block_on(self.inner.nodes())
    }

    pub fn provision(
        &self,
        ident: &str,
        target: ProvisionTarget,
        arguments: Map<String, Value>,
    ) -> Result<(), ClientError> {
        self.runtime
            .block_on(self.inner.provision(ident, target, arguments))
    }

    pub fn power(&self, ident: &str, target: PowerTarget) -> Result<(), ClientError> {
        self.runtime.block_on(self.inner.power(ident, target))
    }
}
