//! Names of kernel codes as output shows them: QP types, MTUs, access flags, work completion
//! statuses, async and CM event types, TCP and port states. Unknown values print as numbers.

use super::CompactString;

/// `enum ib_qp_type` name, or the raw number for types we do not name.
pub fn qp_type_name(raw: u32) -> String {
    match raw {
        0 => "SMI".into(),
        1 => "GSI".into(),
        2 => "RC".into(),
        3 => "UC".into(),
        4 => "UD".into(),
        5 => "RAW_IPV6".into(),
        6 => "RAW_ETHERTYPE".into(),
        8 => "RAW_PACKET".into(),
        9 => "XRC_INI".into(),
        10 => "XRC_TGT".into(),
        0x1000 => "DRIVER".into(),
        n => format!("TYPE_{n}"),
    }
}

/// `enum ib_mtu` to bytes (0 when unknown).
pub fn mtu_bytes(raw: u32) -> u32 {
    match raw {
        1..=5 => 128 << raw,
        _ => 0,
    }
}

/// `enum ib_access_flags` as names (`LOCAL_WRITE|REMOTE_READ`), unknown bits in hex.
pub fn access_names(flags: u32) -> String {
    const NAMES: [(u32, &str); 9] = [
        (1, "LOCAL_WRITE"),
        (1 << 1, "REMOTE_WRITE"),
        (1 << 2, "REMOTE_READ"),
        (1 << 3, "REMOTE_ATOMIC"),
        (1 << 4, "MW_BIND"),
        (1 << 5, "ZERO_BASED"),
        (1 << 6, "ON_DEMAND"),
        (1 << 7, "HUGETLB"),
        (1 << 8, "RELAXED_ORDERING"),
    ];
    let mut parts: Vec<String> = NAMES
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, n)| (*n).to_string())
        .collect();
    let known: u32 = NAMES.iter().map(|(b, _)| b).sum();
    if flags & !known != 0 {
        parts.push(format!("{:#x}", flags & !known));
    }
    if parts.is_empty() {
        "LOCAL_READ".into()
    } else {
        parts.join("|")
    }
}

/// `enum ib_wc_status` names.
pub fn wc_status_name(raw: u32) -> CompactString {
    const NAMES: [&str; 22] = [
        "SUCCESS",
        "LOC_LEN_ERR",
        "LOC_QP_OP_ERR",
        "LOC_EEC_OP_ERR",
        "LOC_PROT_ERR",
        "WR_FLUSH_ERR",
        "MW_BIND_ERR",
        "BAD_RESP_ERR",
        "LOC_ACCESS_ERR",
        "REM_INV_REQ_ERR",
        "REM_ACCESS_ERR",
        "REM_OP_ERR",
        "RETRY_EXC_ERR",
        "RNR_RETRY_EXC_ERR",
        "LOC_RDD_VIOL_ERR",
        "REM_INV_RD_REQ_ERR",
        "REM_ABORT_ERR",
        "INV_EECN_ERR",
        "INV_EEC_STATE_ERR",
        "FATAL_ERR",
        "RESP_TIMEOUT_ERR",
        "GENERAL_ERR",
    ];
    NAMES.get(raw as usize).map_or_else(
        || compact_str::format_compact!("WC_STATUS_{raw}"),
        |s| CompactString::const_new(s),
    )
}

/// mlx5 hardware QP event types (`enum mlx5_event`) under the `ib_event_type` name mlx5_ib
/// translates them to.
pub fn mlx5_event_name(raw: u32) -> CompactString {
    let name = match raw {
        0x01 => "PATH_MIG",
        0x02 => "COMM_EST",
        0x03 => "SQ_DRAINED",
        0x05 => "QP_FATAL",
        0x07 => "PATH_MIG_ERR",
        0x10 => "QP_REQ_ERR",
        0x11 => "QP_ACCESS_ERR",
        0x13 => "QP_LAST_WQE_REACHED",
        n => return compact_str::format_compact!("MLX5_EVENT_{n:#x}"),
    };
    CompactString::const_new(name)
}

/// `enum ib_event_type` names.
pub fn ib_event_name(raw: u32) -> CompactString {
    const NAMES: [&str; 20] = [
        "CQ_ERR",
        "QP_FATAL",
        "QP_REQ_ERR",
        "QP_ACCESS_ERR",
        "COMM_EST",
        "SQ_DRAINED",
        "PATH_MIG",
        "PATH_MIG_ERR",
        "DEVICE_FATAL",
        "PORT_ACTIVE",
        "PORT_ERR",
        "LID_CHANGE",
        "PKEY_CHANGE",
        "SM_CHANGE",
        "SRQ_ERR",
        "SRQ_LIMIT_REACHED",
        "QP_LAST_WQE_REACHED",
        "CLIENT_REREGISTER",
        "GID_CHANGE",
        "WQ_FATAL",
    ];
    NAMES.get(raw as usize).map_or_else(
        || compact_str::format_compact!("EVENT_{raw}"),
        |s| CompactString::const_new(s),
    )
}

/// `enum rdma_cm_event_type` names.
pub fn cm_event_name(raw: u32) -> CompactString {
    const NAMES: [&str; 16] = [
        "ADDR_RESOLVED",
        "ADDR_ERROR",
        "ROUTE_RESOLVED",
        "ROUTE_ERROR",
        "CONNECT_REQUEST",
        "CONNECT_RESPONSE",
        "CONNECT_ERROR",
        "UNREACHABLE",
        "REJECTED",
        "ESTABLISHED",
        "DISCONNECTED",
        "DEVICE_REMOVAL",
        "MULTICAST_JOIN",
        "MULTICAST_ERROR",
        "ADDR_CHANGE",
        "TIMEWAIT_EXIT",
    ];
    NAMES.get(raw as usize).map_or_else(
        || compact_str::format_compact!("CM_EVENT_{raw}"),
        |s| CompactString::const_new(s),
    )
}

/// `enum tcp_state` names.
pub fn tcp_state_name(raw: u16) -> String {
    const NAMES: [&str; 13] = [
        "UNKNOWN",
        "ESTABLISHED",
        "SYN_SENT",
        "SYN_RECV",
        "FIN_WAIT1",
        "FIN_WAIT2",
        "TIME_WAIT",
        "CLOSE",
        "CLOSE_WAIT",
        "LAST_ACK",
        "LISTEN",
        "CLOSING",
        "NEW_SYN_RECV",
    ];
    NAMES
        .get(raw as usize)
        .map_or_else(|| format!("STATE_{raw}"), |s| (*s).to_string())
}

pub fn port_state_name(raw: u32) -> &'static str {
    match raw {
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        rdmatrace_common::event::PORT_STATE_REMOVED => "REMOVED",
        _ => "?",
    }
}
