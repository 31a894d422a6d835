//! uwsgi's configuration for an OpenStack WSGI API: the same settings for every service, so a
//! fix (keep-alive, buffer size, worker shutdown) reaches all of them at once.

/// One API's uwsgi settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uwsgi<'a> {
    /// Address uwsgi listens on, e.g. `0.0.0.0:8778`.
    pub listen: &'a str,
    /// uwsgi `home` (a virtualenv), when not the image's system Python.
    pub python_home: Option<&'a str>,
    /// Worker processes (at least one is started).
    pub workers: u32,
    /// The WSGI module, e.g. `placement.wsgi.api:application`.
    pub module: &'a str,
    /// The environment variable naming the configuration directory and its value, e.g.
    /// `("OS_PLACEMENT_CONFIG_DIR", "/etc/placement")`.
    pub config_dir_env: (&'a str, &'a str),
}

impl Uwsgi<'_> {
    /// The `uwsgi.ini` text.
    pub fn render(&self) -> String {
        let mut s = String::from("[uwsgi]\n");
        s.push_str(&format!("http-socket = {}\n", self.listen));
        if let Some(home) = self.python_home {
            s.push_str(&format!("home = {home}\n"));
        }
        s.push_str(&format!(
            "master = true\nprocesses = {}\nthreads = 1\nenable-threads = true\nlazy-apps = true\nneed-app = true\ndie-on-term = true\n",
            self.workers.max(1)
        ));
        // uwsgi's http-socket does not keep connections alive; clients that reuse connections
        // would see resets without this header.
        s.push_str(
            "add-header = Connection: close\nbuffer-size = 65535\nworker-reload-mercy = 2\n",
        );
        s.push_str(&format!("module = {}\n", self.module));
        s.push_str(&format!(
            "env = {}={}\n",
            self.config_dir_env.0, self.config_dir_env.1
        ));
        s
    }
}
