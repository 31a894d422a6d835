//! Watch streams: newline-delimited JSON `{type, object}` events.
//!
//! A watch registers with the store under the state lock, taking the replay
//! backlog in the same critical section, so no event is lost or duplicated
//! between the backlog and live delivery.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::stream;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::error::{ApiError, ApiResult, Cause};
use crate::ops::matches;
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::{App, Params, Render, object_namespace, partial_metadata, stream_response};
use crate::store::{EventType, StoredEvent, WatchFrom, WatchMsg};

/// Default watch duration when the client sets no `timeoutSeconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

struct WatchStream {
    app: Arc<App>,
    id: u64,
    info: ResourceInfo,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    mode: Render,
    backlog: VecDeque<Arc<StoredEvent>>,
    rx: mpsc::UnboundedReceiver<WatchMsg>,
    deadline: Instant,
    initial_end: Option<u64>,
    bookmarks: bool,
    /// What a Table row's `object` holds, when the watch renders Tables.
    include: crate::table::IncludeObject,
    /// Whether a Table with column definitions was sent: a real API server sends them with
    /// the first event only (`NoHeaders` on the rest), and `kubectl get -w` relies on it.
    headers_sent: bool,
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        // the client went away or the watch ended: stop fanning events out to it
        self.app.lock().store.unregister(self.id);
    }
}

fn bookmark(info: &ResourceInfo, rv: u64, initial_end: bool) -> String {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let line = json!({
        "type": "BOOKMARK",
        "object": {"kind": info.kind, "apiVersion": info.api_version(), "metadata": meta},
    });
    format!("{line}\n")
}

impl WatchStream {
    fn visible(&self, obj: &Value) -> bool {
        self.ns
            .as_deref()
            .is_none_or(|n| object_namespace(obj) == n)
            && matches(&self.info, obj, &self.labels, &self.fields)
    }

    /// Render one stored event for this watcher, translating selector transitions.
    fn render(&mut self, ev: &StoredEvent) -> Option<String> {
        let now = self.visible(&ev.object);
        let before = ev.old.as_ref().is_some_and(|o| self.visible(o));
        let type_ = match ev.type_ {
            EventType::Added => now.then_some("ADDED"),
            EventType::Modified => match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            },
            EventType::Deleted => (now || before).then_some("DELETED"),
        }?;
        let obj = self.info.from_stored(&ev.object);
        let obj = match self.mode {
            Render::Metadata => partial_metadata(&obj),
            Render::Table => {
                let mut table = crate::table::object_table(&self.info, &obj, self.include);
                if self.headers_sent {
                    table["columnDefinitions"] = Value::Null;
                }
                self.headers_sent = true;
                table
            }
            Render::Full => obj,
        };
        Some(format!("{}\n", json!({"type": type_, "object": obj})))
    }

    async fn next_line(&mut self) -> Option<String> {
        loop {
            if let Some(ev) = self.backlog.pop_front() {
                if let Some(line) = self.render(&ev) {
                    return Some(line);
                }
                continue;
            }
            if let Some(rv) = self.initial_end.take() {
                return Some(bookmark(&self.info, rv, true));
            }
            tokio::select! {
                msg = self.rx.recv() => match msg {
                    // the registration was dropped (fault hook or shutdown): end the stream
                    None => return None,
                    Some(WatchMsg::Event(ev)) => {
                        if let Some(line) = self.render(&ev) {
                            return Some(line);
                        }
                    }
                    Some(WatchMsg::Bookmark(rv)) => {
                        if self.bookmarks {
                            return Some(bookmark(&self.info, rv, false));
                        }
                    }
                },
                _ = tokio::time::sleep_until(self.deadline) => return None,
            }
        }
    }
}

/// Serve `?watch=true` for a resource.
pub fn serve(
    app: Arc<App>,
    info: ResourceInfo,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    params: &Params,
    mode: Render,
) -> ApiResult<Response> {
    let bookmarks = params.flag("allowWatchBookmarks");
    let send_initial = params.flag("sendInitialEvents");
    if send_initial && params.get("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![Cause::new(
                "FieldValueForbidden",
                "sendInitialEvents",
                "Forbidden: sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan",
            )],
        ));
    }
    let from =
        if send_initial {
            WatchFrom::Current
        } else {
            match params.get("resourceVersion") {
                None | Some("0") => WatchFrom::Current,
                Some(s) => WatchFrom::After(s.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {s:?}"))
                })?),
            }
        };
    let timeout = match params.get("timeoutSeconds") {
        Some(s) => Duration::from_secs(
            s.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {s:?}")))?,
        ),
        None => DEFAULT_TIMEOUT,
    };
    let started = app.lock().store.watch(&info.storage, from, bookmarks);
    let start = match started {
        Ok(s) => s,
        Err(oldest) => {
            let requested = params.get("resourceVersion").unwrap_or("");
            let status =
                ApiError::expired(format!("too old resource version: {requested} ({oldest})"))
                    .to_status();
            let line = format!("{}\n", json!({"type": "ERROR", "object": status}));
            return Ok(stream_response(Body::from(line)));
        }
    };
    let ws = WatchStream {
        app,
        id: start.id,
        info,
        ns,
        labels,
        fields,
        mode,
        backlog: start.backlog.into(),
        rx: start.rx,
        deadline: Instant::now() + timeout,
        initial_end: (send_initial && bookmarks).then_some(start.rv),
        bookmarks,
        include: crate::table::IncludeObject::parse(params.get("includeObject"))
            .map_err(ApiError::bad_request)?,
        headers_sent: false,
    };
    let s = stream::unfold(ws, |mut ws| async move {
        let line = ws.next_line().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(Bytes::from(line)), ws))
    });
    Ok(stream_response(Body::from_stream(s)))
}
