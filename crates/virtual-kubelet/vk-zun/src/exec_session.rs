//! Exec with stdin on Zun: end-of-input and the exit code (pure).
//!
//! Zun's only exec with stdin is its interactive exec through zun-wsproxy,
//! which always has a TTY (zun 18 `execute_create`: `stdin=tty=interactive`)
//! and reports no exit code. A TTY has no end-of-input but a Ctrl-D at the
//! start of a line in canonical mode, echoes what it gets, turns `\n` into
//! `\r\n` on output, and would take control bytes of binary input as line
//! editing and signals. So the node runs the pod's command under a small
//! `sh` wrapper ([`wrapper_command`]):
//!
//! - **without a TTY** (`kubectl exec -i`, `kubectl cp`, `sh < script`): the
//!   wrapper turns echo and output processing off (`stty -echo -opost`:
//!   output bytes pass unchanged), and the node sends stdin in batches
//!   ([`StdinEncoder`]): a line with the number of base64 lines that follow,
//!   then those lines (printable ASCII only, which canonical mode passes
//!   unchanged). A loop reads the count with `read` and hands the batch to
//!   `head -n COUNT | base64 -d`, which writes into a pipe to the command;
//!   end of stdin is a Ctrl-D after the last batch, which ends the loop and
//!   so closes the command's stdin. `head` takes exactly the batch: a TTY in
//!   canonical mode returns at most one line per `read(2)` (POSIX), so
//!   nothing past it is consumed. Not a `read` per data line: the shell's
//!   `read` takes one byte per system call and each line then cost two
//!   processes, about 85 KB/s on an idle machine and under 30 KB/s under
//!   load, too slow for a `kubectl cp` of a few MiB to finish before the
//!   client's deadlines. The command's stdout and stderr go through a pipe
//!   (`| cat`), as on a kubelet without a TTY (`tar` refuses to write an
//!   archive to a terminal). The image needs `sh`, `stty`, `base64`, `head`
//!   and `cat` (busybox has them).
//! - **with a TTY** (`kubectl exec -it`): the command runs on the TTY as it
//!   is; end of stdin is a Ctrl-D, as typed.
//! - **without stdin** (`kubectl exec`, `kubectl cp` out): as without a TTY,
//!   stdin `/dev/null`. Zun's own `execute?run=true` is not used for these
//!   when the wrapper can run: its answer is the output decoded as text in a
//!   JSON string (binary output, a `tar`, does not survive) and zun-compute
//!   gives up after `[docker] execute_timeout` (5 s by default).
//!
//! In both, the wrapper prints [`READY`] before the command starts (the node
//! sends nothing earlier: bytes typed before `stty` would be echoed) and,
//! after it, the exit marker `\x01vk-exit-<nonce>:<code>\x02`, which
//! [`ExitReader`] takes off the output and turns into the exit code. The
//! nonce is per exec, so output containing a marker of its own is passed on.

use base64::Engine as _;

/// Printed by the wrapper once its TTY is set up, before the command.
pub const READY: &[u8] = b"\x01vk-exec-ready\x02";
/// Printed instead when `stty` fails (no `stty` in the image).
pub const NO_STTY: &[u8] = b"\x01vk-exec-no-stty\x02";
/// Printed instead when the image has no `base64` or no `head`.
pub const NO_BASE64: &[u8] = b"\x01vk-exec-no-base64\x02";
/// End of stdin on a TTY in canonical mode (at the start of a line).
pub const EOF: &[u8] = b"\x04";
/// Raw bytes per base64 line: 4000 characters and the newline, below the
/// 4095 a Linux TTY keeps of one line in canonical mode (a multiple of 3, so
/// only a batch's last line has padding).
pub const LINE_BYTES: usize = 3000;
/// How much a wrapper may print before its marker.
const MAX_PREAMBLE: usize = 64 * 1024;

/// How the command's stdin reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No TTY for the command: stdin as base64 lines, Ctrl-D its end.
    Pipe,
    /// The command on the exec's TTY (what the client asked for).
    Tty,
    /// No TTY and no stdin (`kubectl exec` without `-i`, `kubectl cp` out):
    /// the output byte for byte, however long the command runs.
    NoStdin,
}

/// The exit marker's opening for `nonce` (the code and `\x02` follow).
pub fn exit_head(nonce: &str) -> Vec<u8> {
    format!("\x01vk-exit-{nonce}:").into_bytes()
}

/// A nonce for one exec (hex, 16 characters): the time and a counter,
/// hashed, so that no two execs of this process share one.
pub fn nonce() -> String {
    use sha2::Digest as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = sha2::Sha256::new();
    h.update(std::process::id().to_le_bytes());
    h.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.update(now.to_le_bytes());
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The argv Zun's interactive exec runs for `command`: `sh -c <wrapper> sh
/// <command...>` (the command's words reach it as `"$@"`, unquoted by no one).
pub fn wrapper_command(command: &[String], mode: Mode, nonce: &str) -> Vec<String> {
    let exit = format!("printf '\\001vk-exit-{nonce}:%d\\002' \"$?\"");
    let script = match mode {
        Mode::Pipe => format!(
            "stty -echo -opost 2>/dev/null || {{ printf '\\001vk-exec-no-stty\\002'; exit 0; }}; \
             {{ command -v base64 && command -v head; }} >/dev/null 2>&1 || {{ printf '\\001vk-exec-no-base64\\002'; exit 0; }}; \
             printf '\\001vk-exec-ready\\002'; \
             while IFS= read -r n; do head -n \"$n\" | base64 -d; done | \
             {{ \"$@\"; {exit}; }} 2>&1 | cat"
        ),
        Mode::Tty => format!("printf '\\001vk-exec-ready\\002'; \"$@\"; {exit}"),
        // stderr into a file, sent base64 in the exit marker: a kubelet keeps
        // it apart from stdout (`kubectl cp` reads a tar there); without a
        // writable temporary file, merged into stdout.
        Mode::NoStdin => format!(
            "stty -echo -opost 2>/dev/null || {{ printf '\\001vk-exec-no-stty\\002'; exit 0; }}; \
             printf '\\001vk-exec-ready\\002'; \
             if e=$(mktemp 2>/dev/null) && command -v base64 >/dev/null 2>&1; then \
             {{ \"$@\" 2>\"$e\"; printf '\\001vk-exit-{nonce}:%d:' \"$?\"; base64 <\"$e\"; printf '\\002'; }} </dev/null | cat; \
             rm -f \"$e\"; \
             else {{ \"$@\"; {exit}; }} </dev/null 2>&1 | cat; fi"
        ),
    };
    let mut argv = vec!["sh".to_string(), "-c".to_string(), script, "sh".to_string()];
    argv.extend(command.iter().cloned());
    argv
}

/// Stdin as the wrapper reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StdinEncoder {
    mode: Mode,
}

impl StdinEncoder {
    /// The encoder of `mode`.
    pub fn new(mode: Mode) -> Self {
        Self { mode }
    }

    /// The bytes to send for `chunk` of the client's stdin: for [`Mode::Pipe`]
    /// one batch, its line count and its base64 lines (decoded as soon as
    /// the batch is in, so nothing waits for more input), for [`Mode::Tty`]
    /// the bytes as they are.
    pub fn encode(&self, chunk: &[u8]) -> Vec<u8> {
        match self.mode {
            Mode::Tty => chunk.to_vec(),
            Mode::NoStdin => Vec::new(),
            Mode::Pipe if chunk.is_empty() => Vec::new(),
            Mode::Pipe => {
                let engine = base64::engine::general_purpose::STANDARD;
                let lines = chunk.len().div_ceil(LINE_BYTES);
                let mut out = Vec::with_capacity(chunk.len() * 4 / 3 + lines + 16);
                out.extend_from_slice(format!("{lines}\n").as_bytes());
                for piece in chunk.chunks(LINE_BYTES) {
                    out.extend_from_slice(engine.encode(piece).as_bytes());
                    out.push(b'\n');
                }
                out
            }
        }
    }

    /// Whether each [`Self::encode`] is a batch the wrapper pays processes
    /// for (so the client's small writes are better gathered into one).
    pub fn batched(&self) -> bool {
        self.mode == Mode::Pipe
    }

    /// The end of stdin: Ctrl-D, at the start of a line after [`Self::encode`]'s
    /// lines.
    pub fn eof(&self) -> &'static [u8] {
        EOF
    }
}

/// Why a wrapper did not start the command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WrapperError {
    /// No `stty` in the image.
    #[error(
        "exec with stdin on this node runs the command under `sh` with `stty`, `base64`, `head` and `cat` (busybox has them): the container's image has no working `stty`"
    )]
    NoStty,
    /// No `base64` or no `head` in the image.
    #[error(
        "exec with stdin on this node runs the command under `sh` with `stty`, `base64`, `head` and `cat` (busybox has them): the container's image has no `base64` or no `head`"
    )]
    NoBase64,
    /// The wrapper printed something else before its marker, or ended.
    #[error("the exec wrapper in the container did not start: {0:?}")]
    NotStarted(String),
}

impl WrapperError {
    /// Whether the wrapper could not run at all because the image has no
    /// `sh` (what Docker says when the exec's binary is missing).
    pub fn no_shell(&self) -> bool {
        match self {
            WrapperError::NotStarted(text) => {
                text.contains("executable file not found") || text.contains("no such file")
            }
            _ => false,
        }
    }
}

/// Reads what the wrapper printed before its [`READY`] marker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preamble {
    buf: Vec<u8>,
}

impl Preamble {
    /// Takes the next chunk: `Some(rest)` once the marker is seen (what
    /// follows it is the command's output).
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Option<Vec<u8>>, WrapperError> {
        self.buf.extend_from_slice(chunk);
        if find(&self.buf, NO_STTY).is_some() {
            return Err(WrapperError::NoStty);
        }
        if find(&self.buf, NO_BASE64).is_some() {
            return Err(WrapperError::NoBase64);
        }
        if let Some(at) = find(&self.buf, READY) {
            return Ok(Some(self.buf.split_off(at + READY.len())));
        }
        if self.buf.len() > MAX_PREAMBLE {
            return Err(WrapperError::NotStarted(preview(&self.buf)));
        }
        Ok(None)
    }

    /// The output ended before the marker.
    pub fn finish(&self) -> WrapperError {
        WrapperError::NotStarted(preview(&self.buf))
    }
}

/// Takes the exit marker off the command's output. Bytes that may be the
/// start of the marker are held back until it is clear whether they are.
/// The marker is `<head><code>\x02`, or `<head><code>:<base64 of stderr>\x02`
/// ([`Mode::NoStdin`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitReader {
    head: Vec<u8>,
    held: Vec<u8>,
    code: Option<i32>,
    stderr: Vec<u8>,
}

/// The longest digits (and sign) an exit code has in the marker.
const MAX_CODE_LEN: usize = 12;

impl ExitReader {
    /// A reader for the marker of `nonce`.
    pub fn new(nonce: &str) -> Self {
        Self {
            head: exit_head(nonce),
            held: Vec::new(),
            code: None,
            stderr: Vec::new(),
        }
    }

    /// The exit code, once the marker was read.
    pub fn code(&self) -> Option<i32> {
        self.code
    }

    /// The command's stderr, when the marker carried it.
    pub fn stderr(&self) -> &[u8] {
        &self.stderr
    }

    /// Whether the marker was read (the command has ended: nothing after it
    /// is the command's).
    pub fn done(&self) -> bool {
        self.code.is_some()
    }

    /// The command's output in `chunk` that can be passed on now.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.done() {
            return Vec::new();
        }
        self.held.extend_from_slice(chunk);
        let mut out = Vec::new();
        loop {
            match find(&self.held, &self.head) {
                Some(at) => {
                    let after = at + self.head.len();
                    let tail = &self.held[after..];
                    match parse_code(tail) {
                        Code::Complete(code, stderr) => {
                            out.extend_from_slice(&self.held[..at]);
                            self.held.clear();
                            self.code = Some(code);
                            self.stderr = stderr;
                            return out;
                        }
                        Code::Partial => {
                            out.extend_from_slice(&self.held[..at]);
                            self.held.drain(..at);
                            return out;
                        }
                        Code::NotOne => {
                            // The head followed by something else is data.
                            out.extend_from_slice(&self.held[..after]);
                            self.held.drain(..after);
                        }
                    }
                }
                None => {
                    let keep = partial_prefix(&self.held, &self.head);
                    let pass = self.held.len() - keep;
                    out.extend_from_slice(&self.held[..pass]);
                    self.held.drain(..pass);
                    return out;
                }
            }
        }
    }

    /// The output ended: what was held back is data after all.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

enum Code {
    Complete(i32, Vec<u8>),
    Partial,
    NotOne,
}

fn parse_code(tail: &[u8]) -> Code {
    let end = tail.iter().position(|&b| b == 0x02);
    let body = &tail[..end.unwrap_or(tail.len())];
    let (digits, rest) = match body.iter().position(|&b| b == b':') {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let valid_code = digits
        .iter()
        .enumerate()
        .all(|(i, &b)| b.is_ascii_digit() || (i == 0 && b == b'-'))
        && digits.len() <= MAX_CODE_LEN;
    let valid_rest = rest.is_none_or(|r| {
        r.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"+/=\r\n".contains(&b))
    });
    if !valid_code || !valid_rest {
        return Code::NotOne;
    }
    if end.is_none() {
        return Code::Partial;
    }
    let Some(code) = std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse::<i32>().ok())
    else {
        return Code::NotOne;
    };
    let stderr = match rest {
        None => Vec::new(),
        Some(r) => {
            let text: Vec<u8> = r
                .iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            match base64::engine::general_purpose::STANDARD.decode(&text) {
                Ok(v) => v,
                Err(_) => return Code::NotOne,
            }
        }
    };
    Code::Complete(code, stderr)
}

/// The length of the longest suffix of `hay` that is a proper prefix of
/// `needle`.
fn partial_prefix(hay: &[u8], needle: &[u8]) -> usize {
    let max = hay.len().min(needle.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|&n| hay[hay.len() - n..] == needle[..n])
        .unwrap_or(0)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn preview(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    s.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn octal(m: &[u8]) -> String {
        String::from_utf8_lossy(m)
            .replace('\u{1}', "\\001")
            .replace('\u{2}', "\\002")
    }

    #[test]
    fn the_pipe_wrapper_decodes_stdin_and_prints_the_markers() {
        let argv = wrapper_command(
            &[
                "tar".into(),
                "xf".into(),
                "-".into(),
                "-C".into(),
                "/tmp/a b".into(),
            ],
            Mode::Pipe,
            "abc123",
        );
        assert_eq!(argv[..2], ["sh".to_string(), "-c".to_string()]);
        assert_eq!(argv[3], "sh", "$0 of the script");
        assert_eq!(argv[4..], ["tar", "xf", "-", "-C", "/tmp/a b"]);
        let script = &argv[2];
        assert!(script.starts_with("stty -echo -opost"), "{script}");
        for m in [READY, NO_STTY, NO_BASE64] {
            assert!(script.contains(&octal(m)), "{} in {script}", octal(m));
        }
        assert!(
            script.contains("printf '\\001vk-exit-abc123:%d\\002' \"$?\""),
            "{script}"
        );
        assert!(script.contains("base64 -d"), "{script}");
        assert!(script.ends_with("2>&1 | cat"), "{script}");
        // READY comes after stty, so nothing the node sends is echoed.
        assert!(script.find("stty").unwrap() < script.find(&octal(READY)).unwrap());
    }

    #[test]
    fn the_wrapper_without_stdin_keeps_stderr_apart() {
        let argv = wrapper_command(
            &[
                "sh".into(),
                "-c".into(),
                "printf 'a\\0b'; echo warn >&2; exit 3".into(),
            ],
            Mode::NoStdin,
            "q",
        );
        let script = argv[2].replace(
            "stty -echo -opost 2>/dev/null || { printf '\\001vk-exec-no-stty\\002'; exit 0; }; ",
            "",
        );
        assert!(argv[2].starts_with("stty -echo -opost"), "{}", argv[2]);
        assert_eq!(StdinEncoder::new(Mode::NoStdin).encode(b"x"), b"");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .args(&argv[3..])
            .output()
            .unwrap();
        let rest = Preamble::default()
            .feed(&out.stdout)
            .unwrap()
            .expect("ready");
        let mut r = ExitReader::new("q");
        let mut got = r.feed(&rest);
        got.extend(r.finish());
        assert_eq!(got, b"a\0b", "stdout alone");
        assert_eq!((r.code(), r.stderr()), (Some(3), &b"warn\n"[..]));
    }

    #[test]
    fn the_tty_wrapper_runs_the_command_on_the_terminal() {
        let argv = wrapper_command(&["sh".into()], Mode::Tty, "n1");
        assert_eq!(
            argv[2],
            "printf '\\001vk-exec-ready\\002'; \"$@\"; printf '\\001vk-exit-n1:%d\\002' \"$?\""
        );
        assert_eq!(argv[3..], ["sh", "sh"]);
    }

    #[test]
    fn the_wrapper_runs_in_a_real_shell_with_its_markers_and_exit_code() {
        // The script itself, in this machine's sh, without the TTY part.
        let argv = wrapper_command(
            &["sh".into(), "-c".into(), "cat; echo err >&2; exit 7".into()],
            Mode::Pipe,
            "t1",
        );
        let script = argv[2].replace(
            "stty -echo -opost 2>/dev/null || { printf '\\001vk-exec-no-stty\\002'; exit 0; }; ",
            "",
        );
        let input = StdinEncoder::new(Mode::Pipe).encode(&[0, 1, 2, 255, b'\n', b'x']);
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .args(&argv[3..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let out = child.wait_with_output().unwrap();
        let mut pre = Preamble::default();
        let rest = pre.feed(&out.stdout).unwrap().expect("ready");
        let mut r = ExitReader::new("t1");
        let mut got = r.feed(&rest);
        got.extend(r.finish());
        assert_eq!(got, b"\x00\x01\x02\xff\nxerr\n");
        assert_eq!(r.code(), Some(7));
    }

    #[test]
    fn stdin_is_batches_of_base64_lines_and_its_end_a_ctrl_d() {
        let e = StdinEncoder::new(Mode::Pipe);
        assert_eq!(e.encode(b"abc\n"), b"1\nYWJjCg==\n");
        assert_eq!(e.encode(b""), b"");
        let big = vec![0xffu8; LINE_BYTES * 2 + 1];
        let enc = e.encode(&big);
        let mut lines: Vec<&[u8]> = enc.split(|&b| b == b'\n').collect();
        assert_eq!(lines.remove(0), b"3", "the batch's line count first");
        assert_eq!(lines.len(), 4, "three lines and the empty rest");
        assert!(lines.iter().all(|l| l.len() < 4095));
        assert!(
            enc.iter()
                .all(|&b| b == b'\n' || b.is_ascii_alphanumeric() || b"+/=".contains(&b)),
            "nothing a canonical TTY would take as editing or a signal"
        );
        let engine = base64::engine::general_purpose::STANDARD;
        let decoded: Vec<u8> = lines
            .iter()
            .filter(|l| !l.is_empty())
            .flat_map(|l| engine.decode(l).unwrap())
            .collect();
        assert_eq!(decoded, big);
        assert_eq!(e.eof(), b"\x04");
        let t = StdinEncoder::new(Mode::Tty);
        assert_eq!(t.encode(b"ls\r"), b"ls\r");
        assert_eq!(t.eof(), b"\x04");
    }

    #[test]
    fn the_preamble_ends_at_ready_or_names_what_is_missing() {
        let mut p = Preamble::default();
        assert_eq!(p.feed(b"\x01vk-exec-re"), Ok(None));
        assert_eq!(p.feed(b"ady\x02out"), Ok(Some(b"out".to_vec())));
        assert_eq!(
            Preamble::default().feed(NO_BASE64),
            Err(WrapperError::NoBase64)
        );
        assert_eq!(Preamble::default().feed(NO_STTY), Err(WrapperError::NoStty));
        let mut none = Preamble::default();
        none.feed(b"OCI runtime exec failed: exec: \"sh\": executable file not found in $PATH")
            .unwrap();
        assert!(none.finish().no_shell());
        assert!(!WrapperError::NotStarted("other".into()).no_shell());
        assert!(matches!(
            Preamble::default().feed(&vec![b'x'; MAX_PREAMBLE + 1]),
            Err(WrapperError::NotStarted(_))
        ));
    }

    #[test]
    fn the_exit_marker_is_taken_off_in_any_chunking() {
        let mut stream = b"out\x01put\r\n".to_vec();
        stream.extend_from_slice(&[0, 255, 1]);
        let data = stream.clone();
        stream.extend_from_slice(b"\x01vk-exit-n9:42\x02");
        for split in 0..=stream.len() {
            let mut r = ExitReader::new("n9");
            let mut got = r.feed(&stream[..split]);
            got.extend(r.feed(&stream[split..]));
            got.extend(r.finish());
            assert_eq!(got, data, "split at {split}");
            assert_eq!(r.code(), Some(42), "split at {split}");
        }
        // Byte by byte.
        let mut r = ExitReader::new("n9");
        let mut got = Vec::new();
        for b in &stream {
            got.extend(r.feed(std::slice::from_ref(b)));
        }
        assert_eq!(got, data);
        assert!(r.done());
        assert_eq!(r.feed(b"after"), b"", "nothing after the marker is output");
    }

    #[test]
    fn another_nonce_or_a_broken_marker_is_data() {
        let mut r = ExitReader::new("n9");
        let other = b"\x01vk-exit-zz:1\x02";
        assert_eq!(r.feed(other), other.to_vec());
        let broken = b"\x01vk-exit-n9:12x\x02";
        assert_eq!(r.feed(broken), broken.to_vec());
        assert_eq!(r.code(), None);
        // A prefix held back at the end of the output is data.
        assert_eq!(r.feed(b"ab\x01vk-ex"), b"ab");
        assert_eq!(r.finish(), b"\x01vk-ex");
        // stderr in the marker, base64 in lines.
        let mut e = ExitReader::new("n9");
        assert_eq!(e.feed(b"out\x01vk-exit-n9:2:ZXJy\nb3I=\n"), b"out");
        assert!(!e.done());
        assert_eq!(e.feed(b"\x02"), b"");
        assert_eq!((e.code(), e.stderr()), (Some(2), &b"error"[..]));
        let mut neg = ExitReader::new("n9");
        assert_eq!(neg.feed(b"\x01vk-exit-n9:-1\x02"), b"");
        assert_eq!(neg.code(), Some(-1));
    }

    /// Runs `argv` on a new pseudo-terminal (as Docker's exec with a TTY
    /// does): waits for the ready marker, then writes each of `batches`
    /// ([`StdinEncoder`]'s output) and, when `expect` is given for it, reads
    /// until the output so far contains it before the next batch; then the
    /// end of stdin. Gives the command's output and exit code.
    fn on_a_pty(
        argv: &[String],
        env: &[(&str, &str)],
        nonce: &str,
        batches: &[(Vec<u8>, Option<&[u8]>)],
    ) -> (Vec<u8>, Option<i32>) {
        use std::io::{Read as _, Write as _};
        use std::os::fd::FromRawFd as _;
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty writes two new descriptors into the given ints.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty");
        // SAFETY: both descriptors are new and owned here alone.
        let (master, slave) = unsafe {
            (
                std::fs::File::from_raw_fd(master),
                std::os::fd::OwnedFd::from_raw_fd(slave),
            )
        };
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        // The parent's copies of the slave are closed (moved into `cmd`).
        drop(cmd);
        let (out_tx, out_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let mut reader = master.try_clone().unwrap();
        let pump = std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            // EIO once the last process holding the slave has gone.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                if out_tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        let mut writer = master;
        let mut pre = Preamble::default();
        let mut seen = loop {
            let chunk = out_rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("the ready marker");
            if let Some(rest) = pre.feed(&chunk).unwrap() {
                break rest;
            }
        };
        for (batch, expect) in batches {
            writer.write_all(batch).unwrap();
            if let Some(want) = expect {
                while !seen.windows(want.len()).any(|w| w == *want) {
                    seen.extend(
                        out_rx
                            .recv_timeout(std::time::Duration::from_secs(60))
                            .expect("the answer to the batch before stdin ends"),
                    );
                }
            }
        }
        writer
            .write_all(StdinEncoder::new(Mode::Pipe).eof())
            .unwrap();
        let mut r = ExitReader::new(nonce);
        let mut got = r.feed(&seen);
        while !r.done() {
            match out_rx.recv_timeout(std::time::Duration::from_secs(60)) {
                Ok(chunk) => got.extend(r.feed(&chunk)),
                Err(_) => break,
            }
        }
        got.extend(r.finish());
        drop(writer);
        child.wait().unwrap();
        pump.join().unwrap();
        (got, r.code())
    }

    /// 64 KiB with every byte value, TTY control bytes among them.
    fn binary(len: usize) -> Vec<u8> {
        let mut x: u32 = 0x9e37_79b9;
        (0..len)
            .map(|i| {
                if i < 256 {
                    return i as u8;
                }
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 8) as u8
            })
            .collect()
    }

    #[test]
    fn stdin_reaches_the_command_on_a_real_tty_byte_exact_one_decoder_per_batch() {
        // The real `base64`, behind a shim that counts its runs.
        let real = std::process::Command::new("sh")
            .args(["-c", "command -v base64"])
            .output()
            .unwrap();
        let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
        assert!(!real.is_empty(), "no base64 on this machine");
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("runs");
        let shim = dir.path().join("base64");
        std::fs::write(
            &shim,
            format!("#!/bin/sh\necho run >> \"$RUNS\"\nexec {real} \"$@\"\n"),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:{}",
            dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let env = [("PATH", path.as_str()), ("RUNS", count.to_str().unwrap())];
        let enc = StdinEncoder::new(Mode::Pipe);

        // A line typed, answered while stdin stays open; then 64 KiB in two
        // batches of many lines each, byte for byte; then the end of stdin.
        let data = binary(64 * 1024);
        let (a, b) = data.split_at(40 * 1024);
        let argv = wrapper_command(
            &[
                "sh".into(),
                "-c".into(),
                "read x; echo got:$x; cat; exit 3".into(),
            ],
            Mode::Pipe,
            "p1",
        );
        let (got, code) = on_a_pty(
            &argv,
            &env,
            "p1",
            &[
                (enc.encode(b"ping\n"), Some(b"got:ping\n")),
                (enc.encode(a), None),
                (enc.encode(b), None),
            ],
        );
        let mut want = b"got:ping\n".to_vec();
        want.extend_from_slice(&data);
        assert!(
            got == want,
            "{} bytes, want {} (first difference at {:?})",
            got.len(),
            want.len(),
            got.iter().zip(&want).position(|(x, y)| x != y)
        );
        assert_eq!(code, Some(3));
        let runs = std::fs::read_to_string(&count).unwrap().lines().count();
        assert_eq!(
            runs,
            3,
            "one decoder per batch (3 batches of {} base64 lines), not one per line",
            1 + a.len().div_ceil(LINE_BYTES) + b.len().div_ceil(LINE_BYTES)
        );

        // The end of stdin with nothing sent: `wc -c` sees it at once.
        let argv = wrapper_command(&["wc".into(), "-c".into()], Mode::Pipe, "p2");
        let (got, code) = on_a_pty(&argv, &env, "p2", &[]);
        assert_eq!(String::from_utf8_lossy(&got).trim(), "0");
        assert_eq!(code, Some(0));
    }

    #[test]
    fn nonces_differ() {
        let (a, b) = (nonce(), nonce());
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
