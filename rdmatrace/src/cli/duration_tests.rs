//! `parse_duration`: units and every plain number of seconds.

use std::time::Duration;

use super::parse_duration;

#[test]
fn durations_take_units_and_every_plain_number_of_seconds() {
    for (text, secs) in [
        ("30", 30.0),
        ("0.5", 0.5),
        ("1e3", 1000.0),
        ("+5", 5.0),
        ("30s", 30.0),
        ("500ms", 0.5),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
    ] {
        assert_eq!(
            parse_duration(text),
            Ok(Duration::from_secs_f64(secs)),
            "{text}"
        );
    }
    for bad in [
        "0",
        "-1",
        "0s",
        "1e-12",
        "x",
        "5x",
        "",
        "1e300",
        "300000000000000000000d",
    ] {
        assert!(parse_duration(bad).is_err(), "{bad} accepted");
    }
}
