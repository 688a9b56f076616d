//! Parsers for the command-line quantities: rates, loss percentages, durations.

use std::fmt;
use std::time::Duration;

/// A link rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub bits_per_sec: u64,
}

impl Rate {
    /// Bytes per second, rounded up.
    pub fn bytes_per_sec(self) -> u64 {
        self.bits_per_sec.div_ceil(8)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.bits_per_sec;
        for (div, unit) in [
            (1_000_000_000, "gbit"),
            (1_000_000, "mbit"),
            (1_000, "kbit"),
        ] {
            if b >= div && b.is_multiple_of(div) {
                return write!(f, "{}{unit}", b / div);
            }
        }
        write!(f, "{b}bit")
    }
}

/// Parses a rate the way `tc` writes it: a number and a unit, case-insensitive.
///
/// Units: `bit`, `kbit`, `mbit`, `gbit`, `tbit` (powers of 1000), `kibit` .. `tibit` (powers of
/// 1024), and the byte forms `bps`, `kbps`, `mbps`, `gbps`, `tbps` (bytes per second, as in `tc`).
/// The number may have a fraction: `1.5gbit`.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let t = text.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| {
            format!("{text:?}: the unit is missing (examples: 1gbit, 100mbit, 500kbit, 10mbps)")
        })?;
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?}: {num:?} is not a number"))?;
    let (prefix, per_byte) = if let Some(p) = unit.strip_suffix("bit") {
        (p, false)
    } else if let Some(p) = unit.strip_suffix("bps") {
        (p, true)
    } else {
        return Err(format!(
            "{text:?}: unknown unit {unit:?} (use bit, kbit, mbit, gbit, tbit, or bps, kbps, \
             mbps, gbps for bytes per second)"
        ));
    };
    let scale: f64 = match prefix {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        "ki" => 1024.0,
        "mi" => 1024.0 * 1024.0,
        "gi" => 1024.0 * 1024.0 * 1024.0,
        "ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("{text:?}: unknown unit {unit:?}")),
    };
    let bits = value * scale * if per_byte { 8.0 } else { 1.0 };
    if !(8.0..1e15).contains(&bits) {
        return Err(format!(
            "{text:?}: the rate must be between 8bit and 1000tbit"
        ));
    }
    Ok(Rate {
        bits_per_sec: bits.round() as u64,
    })
}

/// A loss probability in hundredths of a percent (0 ..= 10000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loss {
    pub basis_points: u32,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bp = self.basis_points;
        if bp.is_multiple_of(100) {
            write!(f, "{}%", bp / 100)
        } else {
            write!(f, "{}.{:02}%", bp / 100, bp % 100)
        }
    }
}

/// Parses a loss percentage: `5%`, `5`, `0.5%`, `100%` (two decimals at most are kept).
pub fn parse_loss(text: &str) -> Result<Loss, String> {
    let t = text.trim();
    let num = t.strip_suffix('%').unwrap_or(t).trim();
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a percentage (examples: 5%, 0.5%, 100%)"))?;
    if !(0.0..=100.0).contains(&value) {
        return Err(format!("{text:?}: the loss must be between 0% and 100%"));
    }
    Ok(Loss {
        basis_points: (value * 100.0).round() as u32,
    })
}

/// Parses a duration in seconds: `30`, `2.5`, `30s`.
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let num = t.strip_suffix('s').unwrap_or(t);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(value > 0.0 && value < 1e9) {
        return Err(format!(
            "{text:?}: the timeout must be a positive number of seconds"
        ));
    }
    Ok(Duration::from_secs_f64(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        let r = |t| parse_rate(t).unwrap().bits_per_sec;
        assert_eq!(r("1gbit"), 1_000_000_000);
        assert_eq!(r("1Gbit"), 1_000_000_000);
        assert_eq!(r("100mbit"), 100_000_000);
        assert_eq!(r("1.5gbit"), 1_500_000_000);
        assert_eq!(r("500kbit"), 500_000);
        assert_eq!(r("64bit"), 64);
        assert_eq!(r("1mibit"), 1_048_576);
        assert_eq!(r("10mbps"), 80_000_000);
        assert_eq!(r("1kbps"), 8_000);
        assert!(parse_rate("100").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("1gbyte").is_err());
        assert!(parse_rate("0gbit").is_err());
        assert!(parse_rate("1.2.3mbit").is_err());
        assert_eq!(parse_rate("10gbit").unwrap().to_string(), "10gbit");
        assert_eq!(parse_rate("1.5mbit").unwrap().to_string(), "1500kbit");
        assert_eq!(parse_rate("1mibit").unwrap().to_string(), "1048576bit");
    }

    #[test]
    fn losses() {
        let l = |t| parse_loss(t).unwrap().basis_points;
        assert_eq!(l("5%"), 500);
        assert_eq!(l("5"), 500);
        assert_eq!(l("0.5%"), 50);
        assert_eq!(l("0.01%"), 1);
        assert_eq!(l("100%"), 10000);
        assert_eq!(l("0%"), 0);
        assert!(parse_loss("101%").is_err());
        assert!(parse_loss("-1%").is_err());
        assert!(parse_loss("lots").is_err());
        assert_eq!(parse_loss("2.5%").unwrap().to_string(), "2.50%");
        assert_eq!(parse_loss("5%").unwrap().to_string(), "5%");
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_seconds("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_seconds("0.25").unwrap(), Duration::from_millis(250));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("-3").is_err());
        assert!(parse_seconds("soon").is_err());
    }
}
