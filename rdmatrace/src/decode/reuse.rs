//! Decoding into the body the record already holds, for the kinds that come in runs (a burst of
//! retransmits, a round of traffic samples): the body is not built anew and moved, and a name
//! equal to the one already there (the device, the owner) is kept as it is.
//!
//! Each `*_into` function sets every field of its body (the destructuring lists them all, so a field
//! added later does not compile until it is set here): what the correlator wrote into the
//! previous record (an owner) never leaks into the next.

use rdmatrace_common::event::{
    reason, transport, QpIdent, QpTrafficSample, RetransmitEvent, TcpBytesSample,
};

use super::{ip, read::nul_at, tcp_tuple};
use crate::event::{
    Body, CompactString, QpInfo, QpKey, QpTrafficDelta, Retransmit, TcpBytesDelta, Transport,
};

/// `empty` after `fill`: the body of a record that held another kind.
fn filled<T>(mut empty: T, fill: impl FnOnce(&mut T)) -> T {
    fill(&mut empty);
    empty
}

/// `body` becomes the retransmit `ev`, in place when it is a retransmit already.
pub(super) fn retransmit(ev: &RetransmitEvent, body: &mut Body) {
    match body {
        Body::Retransmit(r) => retransmit_into(ev, r),
        _ => *body = Body::Retransmit(filled(empty_retransmit(), |r| retransmit_into(ev, r))),
    }
}

/// `body` becomes the traffic sample `ev`, in place when it is one already.
pub(super) fn qp_traffic(ev: &QpTrafficSample, body: &mut Body) {
    match body {
        Body::QpTraffic(d) => qp_traffic_into(ev, d),
        _ => *body = Body::QpTraffic(filled(empty_qp_traffic(), |d| qp_traffic_into(ev, d))),
    }
}

/// `body` becomes the TCP byte sample `ev`, in place when it is one already.
pub(super) fn tcp_bytes(ev: &TcpBytesSample, body: &mut Body) {
    match body {
        Body::TcpBytes(d) => tcp_bytes_into(ev, d),
        _ => *body = Body::TcpBytes(filled(empty_tcp_bytes(), |d| tcp_bytes_into(ev, d))),
    }
}

/// Sets `dst` to the NUL-padded C string `bytes`, leaving it alone when it holds it already.
pub(super) fn set_c_str(dst: &mut CompactString, bytes: &[u8]) {
    let bytes = &bytes[..nul_at(bytes)];
    if bytes.is_empty() {
        // No name (an owner the correlator fills in): no string built.
        if !dst.is_empty() {
            *dst = CompactString::const_new("");
        }
        return;
    }
    if dst.as_bytes() != bytes {
        *dst = super::c_str(bytes);
    }
}

fn qp_info_into(id: &QpIdent, q: &mut QpInfo) {
    let QpInfo {
        key: QpKey { dev, qpn },
        qp_type,
    } = q;
    set_c_str(dev, &id.dev);
    *qpn = id.qpn;
    *qp_type = id.qp_type;
}

/// A retransmit with every field empty, to decode into.
fn empty_retransmit() -> Retransmit {
    Retransmit {
        transport: Transport::Rxe,
        reason: "unknown",
        qp: None,
        tcp: None,
        owner_pid: 0,
        owner_comm: CompactString::const_new(""),
    }
}

fn retransmit_into(ev: &RetransmitEvent, r: &mut Retransmit) {
    let Retransmit {
        transport: t,
        reason: why,
        qp,
        tcp,
        owner_pid,
        owner_comm,
    } = r;
    *t = match ev.transport {
        transport::MLX5 => Transport::Mlx5,
        transport::TCP => Transport::Tcp,
        _ => Transport::Rxe,
    };
    *why = match ev.reason {
        reason::RXE_RETRANSMIT_TIMER => "retransmit_timer",
        reason::RXE_RNR_NAK_TIMER => "rnr_nak_timer",
        reason::TCP_RETRANSMIT_SKB => "tcp_retransmit_skb",
        _ => "unknown",
    };
    if *t == Transport::Tcp {
        *qp = None;
        *tcp = Some(tcp_tuple(&ev.tcp));
    } else {
        *tcp = None;
        match qp {
            Some(q) => qp_info_into(&ev.qp, q),
            None => *qp = Some(super::qp_info(&ev.qp)),
        }
    }
    *owner_pid = ev.owner.pid;
    set_c_str(owner_comm, &ev.owner.comm);
}

/// A traffic sample with every field empty, to decode into.
fn empty_qp_traffic() -> QpTrafficDelta {
    QpTrafficDelta {
        qp: QpInfo {
            key: QpKey {
                dev: CompactString::const_new(""),
                qpn: 0,
            },
            qp_type: 0,
        },
        tx_packets: 0,
        tx_bytes: 0,
        rx_packets: 0,
        rx_bytes: 0,
        owner_pid: 0,
        owner_comm: CompactString::const_new(""),
    }
}

/// The owner is left for the correlator (emptied here).
fn qp_traffic_into(ev: &QpTrafficSample, d: &mut QpTrafficDelta) {
    let QpTrafficDelta {
        qp,
        tx_packets,
        tx_bytes,
        rx_packets,
        rx_bytes,
        owner_pid,
        owner_comm,
    } = d;
    let t = &ev.traffic;
    qp_info_into(&t.qp, qp);
    *tx_packets = t.tx_packets;
    *tx_bytes = t.tx_bytes;
    *rx_packets = t.rx_packets;
    *rx_bytes = t.rx_bytes;
    *owner_pid = 0;
    *owner_comm = CompactString::const_new("");
}

/// A TCP byte sample with every field empty, to decode into.
fn empty_tcp_bytes() -> TcpBytesDelta {
    TcpBytesDelta {
        tx_bytes: 0,
        rx_bytes: 0,
        tx_calls: 0,
        rx_calls: 0,
        peer: None,
    }
}

fn tcp_bytes_into(ev: &TcpBytesSample, d: &mut TcpBytesDelta) {
    let TcpBytesDelta {
        tx_bytes,
        rx_bytes,
        tx_calls,
        rx_calls,
        peer,
    } = d;
    let b = &ev.bytes;
    *tx_bytes = b.tx_bytes;
    *rx_bytes = b.rx_bytes;
    *tx_calls = b.tx_calls;
    *rx_calls = b.rx_calls;
    *peer = (b.family != 0).then(|| ip(b.family, &b.daddr).to_canonical());
}
