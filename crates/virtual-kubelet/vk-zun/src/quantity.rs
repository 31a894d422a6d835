//! Kubernetes resource quantities (`500m`, `1.5`, `64Mi`, `1G`, `1e3`) as
//! numbers, following `k8s.io/apimachinery/pkg/api/resource` suffixes.

/// Parse a quantity into its value in base units (cores, bytes).
pub fn parse(q: &str) -> Option<f64> {
    let q = q.trim();
    if q.is_empty() {
        return None;
    }
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    let v = n * mult;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// Bytes → MiB, rounded up (Zun takes memory in MiB).
pub fn bytes_to_mib(b: f64) -> u64 {
    (b / (1024.0 * 1024.0)).ceil() as u64
}

/// A CPU count as a quantity string (`500m`, `2`).
pub fn cpu_string(cores: f64) -> String {
    let milli = (cores * 1000.0).round() as i64;
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// MiB as a quantity string (`512Mi`).
pub fn mib_string(mib: i64) -> String {
    format!("{mib}Mi")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        assert_eq!(parse("500m"), Some(0.5));
        assert_eq!(parse("2"), Some(2.0));
        assert_eq!(parse("1.5"), Some(1.5));
        assert_eq!(parse("64Mi"), Some(64.0 * 1048576.0));
        assert_eq!(parse("1G"), Some(1e9));
        assert_eq!(parse("1e3"), Some(1000.0));
        assert_eq!(parse("128974848"), Some(128974848.0));
        assert_eq!(parse("12x"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("-1"), None);
    }

    #[test]
    fn conversions() {
        assert_eq!(bytes_to_mib(64.0 * 1048576.0), 64);
        assert_eq!(bytes_to_mib(1e8), 96);
        assert_eq!(cpu_string(0.5), "500m");
        assert_eq!(cpu_string(20.0), "20");
        assert_eq!(mib_string(512), "512Mi");
    }
}
