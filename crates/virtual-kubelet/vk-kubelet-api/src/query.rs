//! Query parameters of the kubelet's paths (pure): `containerLogs`'
//! `PodLogOptions` and exec/attach's stream options.

use std::fmt;

/// A bad query parameter, named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryError {
    /// The parameter.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for QueryError {}

fn pairs(query: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn last<'a>(p: &'a [(String, String)], key: &str) -> Option<&'a str> {
    p.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Kubernetes' query booleans (`strconv.ParseBool`; a bare `?follow` is true).
fn boolean(p: &[(String, String)], key: &'static str) -> Result<bool, QueryError> {
    match last(p, key) {
        None => Ok(false),
        Some("" | "1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(v) => Err(QueryError {
            field: key,
            message: format!("invalid boolean {v:?}"),
        }),
    }
}

fn integer(p: &[(String, String)], key: &'static str) -> Result<Option<i64>, QueryError> {
    last(p, key)
        .map(|v| {
            v.parse::<i64>().map_err(|_| QueryError {
                field: key,
                message: format!("invalid integer {v:?}"),
            })
        })
        .transpose()
}

fn positive(
    p: &[(String, String)],
    key: &'static str,
    min: i64,
) -> Result<Option<i64>, QueryError> {
    match integer(p, key)? {
        Some(v) if v < min => Err(QueryError {
            field: key,
            message: if min == 0 {
                "must be greater than or equal to 0".into()
            } else {
                format!("must be greater than {}", min - 1)
            },
        }),
        v => Ok(v),
    }
}

/// `PodLogOptions` as the kubelet reads them from the query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// Stream new lines until the client goes away.
    pub follow: bool,
    /// The previous terminated instance's logs.
    pub previous: bool,
    /// Only the last N lines.
    pub tail_lines: Option<i64>,
    /// Prefix each line with an RFC 3339 timestamp.
    pub timestamps: bool,
    /// Only lines newer than this many seconds.
    pub since_seconds: Option<i64>,
    /// Only lines at or after this time.
    pub since_time: Option<jiff::Timestamp>,
    /// Stop after this many bytes.
    pub limit_bytes: Option<i64>,
}

impl LogQuery {
    /// Parse a raw query string; errors name the field as the API server's
    /// `ValidatePodLogOptions` does.
    pub fn parse(query: &str) -> Result<Self, QueryError> {
        let p = pairs(query);
        let since_time = last(&p, "sinceTime")
            .map(|v| {
                v.parse::<jiff::Timestamp>().map_err(|e| QueryError {
                    field: "sinceTime",
                    message: format!("invalid RFC 3339 time {v:?}: {e}"),
                })
            })
            .transpose()?;
        let q = Self {
            follow: boolean(&p, "follow")?,
            previous: boolean(&p, "previous")?,
            tail_lines: positive(&p, "tailLines", 0)?,
            timestamps: boolean(&p, "timestamps")?,
            since_seconds: positive(&p, "sinceSeconds", 1)?,
            since_time,
            limit_bytes: positive(&p, "limitBytes", 1)?,
        };
        if q.since_seconds.is_some() && q.since_time.is_some() {
            return Err(QueryError {
                field: "sinceSeconds",
                message: "at most one of sinceTime or sinceSeconds may be specified".into(),
            });
        }
        Ok(q)
    }

    /// The Unix second from which lines are wanted, if any.
    pub fn since_unix(&self, now: jiff::Timestamp) -> Option<i64> {
        self.since_time
            .map(|t| t.as_second())
            .or_else(|| self.since_seconds.map(|s| now.as_second() - s))
    }
}

/// exec/attach stream options (`remotecommand`'s `NewOptions`). The kubelet
/// reads `input`, `output`, `error` and `tty` (`1` for on: the API server's
/// `streamLocation` writes them so when it proxies `pods/exec`, as does
/// kube-rs's kubelet client); `PodExecOptions`' own names (`stdin`,
/// `stdout`, `stderr`) are taken too, for clients that reuse the pod path's
/// query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamQuery {
    /// The command (`command` repeated), empty for attach.
    pub command: Vec<String>,
    /// A stdin stream is wanted.
    pub stdin: bool,
    /// A stdout stream is wanted.
    pub stdout: bool,
    /// A stderr stream is wanted.
    pub stderr: bool,
    /// A TTY is wanted.
    pub tty: bool,
}

impl StreamQuery {
    /// Parse exec's (`command` required) or attach's query.
    pub fn parse(query: &str, exec: bool) -> Result<Self, QueryError> {
        let p = pairs(query);
        let command: Vec<String> = p
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect();
        let q = Self {
            command,
            stdin: boolean(&p, "input")? || boolean(&p, "stdin")?,
            stdout: boolean(&p, "output")? || boolean(&p, "stdout")?,
            stderr: boolean(&p, "error")? || boolean(&p, "stderr")?,
            tty: boolean(&p, "tty")?,
        };
        if exec && q.command.is_empty() {
            return Err(QueryError {
                field: "command",
                message: "you must specify at least one command for the container".into(),
            });
        }
        if !q.stdin && !q.stdout && !q.stderr {
            return Err(QueryError {
                field: "stdin",
                message: "you must specify at least 1 of stdin, stdout, stderr".into(),
            });
        }
        if q.tty && q.stderr {
            // As the kubelet: a TTY merges stderr into stdout.
            return Ok(Self { stderr: false, ..q });
        }
        Ok(q)
    }
}

/// Apply `tailLines` and `limitBytes` to a whole log text.
pub fn trim_logs(text: &str, tail: Option<i64>, limit: Option<i64>) -> String {
    let mut out = match tail {
        Some(n) => {
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            let n = usize::try_from(n).unwrap_or(0).min(lines.len());
            lines[lines.len() - n..].concat()
        }
        None => text.to_string(),
    };
    if let Some(l) = limit {
        let l = usize::try_from(l).unwrap_or(0);
        if out.len() > l {
            let mut cut = l;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_options_parse() {
        let q = LogQuery::parse("follow=true&tailLines=3&timestamps=1&limitBytes=10").unwrap();
        assert!(q.follow && q.timestamps && !q.previous);
        assert_eq!(q.tail_lines, Some(3));
        assert_eq!(q.limit_bytes, Some(10));
        assert_eq!(LogQuery::parse("").unwrap(), LogQuery::default());
        assert!(LogQuery::parse("follow").unwrap().follow);
        let t = LogQuery::parse("sinceTime=2026-12-01T05:00:00Z").unwrap();
        let now: jiff::Timestamp = "2026-12-01T06:00:00Z".parse().unwrap();
        assert_eq!(t.since_unix(now), Some(now.as_second() - 3600));
        let s = LogQuery::parse("sinceSeconds=60").unwrap();
        assert_eq!(s.since_unix(now), Some(now.as_second() - 60));
    }

    #[test]
    fn bad_log_options_name_the_field() {
        for (q, field) in [
            ("tailLines=-1", "tailLines"),
            ("tailLines=x", "tailLines"),
            ("sinceSeconds=0", "sinceSeconds"),
            ("limitBytes=0", "limitBytes"),
            ("follow=maybe", "follow"),
            ("sinceTime=yesterday", "sinceTime"),
            (
                "sinceSeconds=5&sinceTime=2026-12-01T05:00:00Z",
                "sinceSeconds",
            ),
        ] {
            assert_eq!(LogQuery::parse(q).unwrap_err().field, field, "{q}");
        }
    }

    #[test]
    fn stream_options_parse() {
        let q = StreamQuery::parse(
            "command=sh&command=-c&command=echo+a%20b&stdout=1&stderr=1",
            true,
        )
        .unwrap();
        assert_eq!(q.command, vec!["sh", "-c", "echo a b"]);
        assert!(q.stdout && q.stderr && !q.stdin && !q.tty);
        assert_eq!(
            StreamQuery::parse("stdout=1", true).unwrap_err().field,
            "command"
        );
        assert_eq!(
            StreamQuery::parse("command=ls", true).unwrap_err().field,
            "stdin"
        );
        let tty = StreamQuery::parse("command=sh&stdin=1&stdout=1&stderr=1&tty=1", true).unwrap();
        assert!(tty.tty && !tty.stderr);
        assert!(
            StreamQuery::parse("stdout=1", false)
                .unwrap()
                .command
                .is_empty()
        );
    }

    #[test]
    fn the_kubelet_s_stream_names_as_the_api_server_sends_them() {
        // kube-apiserver's streamLocation for `kubectl exec -it`.
        let q = StreamQuery::parse("command=sh&input=1&output=1&tty=1&error=1", true).unwrap();
        assert!(q.stdin && q.stdout && q.tty && !q.stderr);
        let q = StreamQuery::parse("command=ls&output=1&error=1", true).unwrap();
        assert!(!q.stdin && q.stdout && q.stderr && !q.tty);
        assert_eq!(
            StreamQuery::parse("command=ls&output=x", true)
                .unwrap_err()
                .field,
            "output"
        );
        let attach = StreamQuery::parse("input=1&output=1", false).unwrap();
        assert!(attach.stdin && attach.stdout && attach.command.is_empty());
    }

    #[test]
    fn tail_and_limit() {
        let t = "a\nb\nc\n";
        assert_eq!(trim_logs(t, Some(2), None), "b\nc\n");
        assert_eq!(trim_logs(t, Some(0), None), "");
        assert_eq!(trim_logs(t, Some(10), None), t);
        assert_eq!(trim_logs(t, None, Some(3)), "a\nb");
        assert_eq!(trim_logs("é", None, Some(1)), "");
    }
}
