//! Parsers for the command line's values: durations (humantime), rates in tc's
//! notation, percentages and Gilbert-Elliott parameters.

use std::time::Duration;

use crate::error::ParseError;
use crate::model::{DropNth, GilbertElliott, Rate};

/// A duration as humantime writes it (`40ms`, `1.5ms`, `250us`, `1s`), or `0`.
pub fn parse_duration(text: &str) -> Result<Duration, ParseError> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text).map_err(|e| ParseError::Duration {
        value: text.to_owned(),
        reason: e.to_string(),
    })
}

/// A rate in tc's notation: a number and `bit`, `kbit`, `mbit` or `gbit`
/// (case-insensitive, an optional `/s`), powers of 1000. Zero is rejected (leave
/// the option out for no limit); so are `bps`, `kbps`, `mbps`, which tc reads as
/// bytes per second.
pub fn parse_rate(text: &str) -> Result<Rate, ParseError> {
    let lower = text.trim().to_ascii_lowercase();
    let lower = lower.strip_suffix("/s").unwrap_or(&lower);
    let split = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| ParseError::Rate(text.to_owned()))?;
    let (number, unit) = lower.split_at(split);
    let multiplier: f64 = match unit.trim() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "bps" | "kbps" | "mbps" | "gbps" => return Err(ParseError::AmbiguousRate(text.to_owned())),
        _ => return Err(ParseError::Rate(text.to_owned())),
    };
    let number: f64 = number
        .parse()
        .map_err(|_| ParseError::NotANumber(text.to_owned()))?;
    let bits = (number * multiplier).round();
    if !bits.is_finite() || bits < 1.0 || bits > u64::MAX as f64 {
        return Err(ParseError::Rate(text.to_owned()));
    }
    Rate::from_bits_per_second(bits as u64).ok_or_else(|| ParseError::Rate(text.to_owned()))
}

/// A percentage (`1%`, `0.25%`, `100%`) as a probability from 0 to 1.
pub fn parse_percent(text: &str) -> Result<f64, ParseError> {
    let number = text
        .trim()
        .strip_suffix('%')
        .ok_or_else(|| ParseError::Percent(text.to_owned()))?;
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| ParseError::Percent(text.to_owned()))?;
    if !(0.0..=100.0).contains(&value) {
        return Err(ParseError::Percent(text.to_owned()));
    }
    Ok(value / 100.0)
}

/// Gilbert-Elliott parameters `p,r[,h[,k]]`, each a percentage: `p` Good→Bad,
/// `r` Bad→Good, `h` the delivery probability in Bad (default 0%: Bad loses
/// everything), `k` the delivery probability in Good (default 100%). So
/// `1%,30%` is the simple Gilbert model.
pub fn parse_gilbert_elliott(text: &str) -> Result<GilbertElliott, ParseError> {
    let fields: Vec<&str> = text.split(',').collect();
    if !(2..=4).contains(&fields.len()) {
        return Err(ParseError::GilbertElliott(text.to_owned()));
    }
    let values = fields
        .iter()
        .map(|f| parse_percent(f))
        .collect::<Result<Vec<f64>, _>>()?;
    Ok(GilbertElliott {
        p: values[0],
        r: values[1],
        h: values.get(2).copied().unwrap_or(0.0),
        k: values.get(3).copied().unwrap_or(1.0),
    })
}

/// A single deterministic drop `N[,MIN_BYTES]`: the Nth frame (from 1) of at
/// least MIN_BYTES bytes (default 0: every frame counts).
pub fn parse_drop_nth(text: &str) -> Result<DropNth, ParseError> {
    let bad = || ParseError::DropNth(text.to_owned());
    let (nth, min_len) = match text.trim().split_once(',') {
        Some((nth, min_len)) => (nth, min_len.trim().parse().map_err(|_| bad())?),
        None => (text.trim(), 0),
    };
    let nth: u64 = nth.trim().parse().map_err(|_| bad())?;
    if nth == 0 {
        return Err(bad());
    }
    Ok(DropNth { nth, min_len })
}

/// A rate for messages: `10 Mbit/s`, `1.5 Gbit/s`, `64 kbit/s`.
pub fn display_rate(rate: Rate) -> String {
    let bits = rate.bits_per_second() as f64;
    let (value, unit) = if bits >= 1e9 {
        (bits / 1e9, "Gbit/s")
    } else if bits >= 1e6 {
        (bits / 1e6, "Mbit/s")
    } else if bits >= 1e3 {
        (bits / 1e3, "kbit/s")
    } else {
        (bits, "bit/s")
    };
    format!("{value} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(text: &str) -> u64 {
        parse_rate(text).expect(text).bits_per_second()
    }

    #[test]
    fn drop_nth_reads_count_and_size() {
        assert_eq!(
            parse_drop_nth("400,1000").expect("valid"),
            DropNth {
                nth: 400,
                min_len: 1000
            }
        );
        assert_eq!(
            parse_drop_nth("7").expect("valid"),
            DropNth { nth: 7, min_len: 0 }
        );
        for bad in ["0", "", "x", "5,", "5,-1", "-3,10", "1.5"] {
            assert!(parse_drop_nth(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn rates_in_tc_notation() {
        assert_eq!(bits("10mbit"), 10_000_000);
        assert_eq!(bits("100Mbit"), 100_000_000);
        assert_eq!(bits("1.5gbit"), 1_500_000_000);
        assert_eq!(bits("64kbit"), 64_000);
        assert_eq!(bits("9600bit"), 9600);
        assert_eq!(bits("10 Mbit/s"), 10_000_000);
        for bad in ["10", "mbit", "0mbit", "10mbyte", "", "1e3mbit", "-5mbit"] {
            assert!(parse_rate(bad).is_err(), "{bad} accepted");
        }
        assert!(matches!(
            parse_rate("10mbps"),
            Err(ParseError::AmbiguousRate(_))
        ));
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("1%"), Ok(0.01));
        assert_eq!(parse_percent("0%"), Ok(0.0));
        assert_eq!(parse_percent("100%"), Ok(1.0));
        assert_eq!(parse_percent("0.5 %"), Ok(0.005));
        for bad in ["1", "0.01", "101%", "-1%", "x%", "%"] {
            assert!(parse_percent(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn gilbert_elliott_defaults_to_the_gilbert_model() {
        let ge = parse_gilbert_elliott("1%,30%").expect("two fields");
        assert_eq!(ge, GilbertElliott::gilbert(0.01, 0.30));
        let ge = parse_gilbert_elliott("1%,50%,30%,99.9%").expect("four fields");
        assert!(
            (ge.h - 0.30).abs() < 1e-12 && (ge.k - 0.999).abs() < 1e-12,
            "{ge:?}"
        );
        for bad in ["1%", "1%,2%,3%,4%,5%", "1,30", "1%,x%"] {
            assert!(parse_gilbert_elliott(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("40ms"), Ok(Duration::from_millis(40)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1s 500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0ms"), Ok(Duration::ZERO));
        assert!(parse_duration("40").is_err());
    }

    #[test]
    fn rates_display() {
        assert_eq!(
            display_rate(parse_rate("10mbit").expect("rate")),
            "10 Mbit/s"
        );
        assert_eq!(
            display_rate(parse_rate("1.5gbit").expect("rate")),
            "1.5 Gbit/s"
        );
    }
}
