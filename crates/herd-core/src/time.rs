//! Timestamps as herd shows them: milliseconds since the Unix epoch (how they are stored) as
//! RFC 3339 UTC text (how every JSON answer carries them), and serde helpers for views.

use serde::Serializer;

/// `ms` (milliseconds since the Unix epoch, UTC) as RFC 3339 with milliseconds:
/// `2026-11-22T03:46:28.427Z`. Times before the epoch are clamped to it.
pub fn rfc3339_ms(ms: i64) -> String {
    let ms = ms.max(0);
    let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        rest / 3600,
        (rest / 60) % 60,
        rest % 60
    )
}

/// The proleptic Gregorian date of day `z` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Serialize a stored timestamp (ms since the epoch) as RFC 3339 text.
pub fn ser_ms<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339_ms(*ms))
}

/// Serialize an optional stored timestamp as RFC 3339 text, or null.
pub fn ser_opt_ms<S: Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => s.serialize_str(&rfc3339_ms(*ms)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_795_325_188_427), "2026-11-22T05:26:28.427Z");
        assert_eq!(rfc3339_ms(-5), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    proptest! {
        #[test]
        fn text_is_well_formed_and_ordered(a in 0i64..8_000_000_000_000, b in 0i64..8_000_000_000_000) {
            let (ta, tb) = (rfc3339_ms(a), rfc3339_ms(b));
            prop_assert_eq!(ta.len(), 24);
            // Fixed-width text sorts as the instants do.
            prop_assert_eq!(a.cmp(&b), ta.cmp(&tb));
            let month: u32 = ta[5..7].parse().unwrap();
            let day: u32 = ta[8..10].parse().unwrap();
            prop_assert!((1..=12).contains(&month) && (1..=31).contains(&day));
        }
    }
}
