//! End-to-end network confinement: TCP ports through Landlock, UDP/raw
//! sockets through seccomp, checked by a python tool printing the errno.

mod sandbox_common;

use std::net::{TcpListener, UdpSocket};

use sandbox_common::{World, py, stdout};

fn connect(w: &World, port: u16) -> Vec<std::ffi::OsString> {
    py(
        w,
        &format!("s = socket.create_connection(('127.0.0.1', {port}), timeout=5)\ns.close()"),
    )
}

#[test]
fn tcp_connect_refused_when_network_disabled() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let w = World::new();
    w.py_profile("off", &[], "network:\n  enabled: false\n");
    assert_eq!(stdout(&w.exec("off", &connect(&w, port), &[])), "EACCES");
    // a listed port does not matter when the network is disabled
    w.py_profile(
        "off2",
        &[],
        &format!("network:\n  enabled: false\n  connect_tcp: [{port}]\n"),
    );
    assert_eq!(stdout(&w.exec("off2", &connect(&w, port), &[])), "EACCES");
    w.py_profile("open", &[], "network:\n  unrestricted: true\n");
    assert_eq!(stdout(&w.exec("open", &connect(&w, port), &[])), "OK");
}

#[test]
fn tcp_connect_only_to_listed_ports() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let other = if port == 65535 { port - 1 } else { port + 1 };
    let w = World::new();
    w.py_profile(
        "other",
        &[],
        &format!("network:\n  enabled: true\n  connect_tcp: [{other}]\n"),
    );
    assert_eq!(stdout(&w.exec("other", &connect(&w, port), &[])), "EACCES");
    w.py_profile(
        "this",
        &[],
        &format!("network:\n  enabled: true\n  connect_tcp: [{port}]\n"),
    );
    assert_eq!(stdout(&w.exec("this", &connect(&w, port), &[])), "OK");
    // binding a TCP port that is not in bind_tcp is refused as well
    let bind_fixed = {
        let free = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = free.local_addr().unwrap().port();
        drop(free);
        py(
            &w,
            &format!("s = socket.socket()\ns.bind(('127.0.0.1', {p}))"),
        )
    };
    assert_eq!(stdout(&w.exec("this", &bind_fixed, &[])), "EACCES");
}

#[test]
fn abstract_unix_sockets_outside_the_sandbox_are_scoped() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("toolsrv-sbx-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _l = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let w = World::new();
    let body = format!("s = socket.socket(socket.AF_UNIX)\ns.connect('\\0{name}')");
    w.py_profile("ports", &[], "network:\n  enabled: true\n");
    assert_eq!(stdout(&w.exec("ports", &py(&w, &body), &[])), "EPERM");
    w.py_profile("open", &[], "network:\n  unrestricted: true\n");
    assert_eq!(stdout(&w.exec("open", &py(&w, &body), &[])), "OK");
}

#[test]
fn udp_and_raw_sockets_refused_when_network_disabled() {
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = receiver.local_addr().unwrap().port();
    let w = World::new();
    w.py_profile("off", &[], "network:\n  enabled: false\n");
    let send = py(
        &w,
        &format!(
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'hi', ('127.0.0.1', {port}))"
        ),
    );
    assert_eq!(stdout(&w.exec("off", &send, &[])), "EACCES");
    for body in [
        "socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)",
        "socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)",
        "socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)",
        "socket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
        "socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)",
        "socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_SCTP)",
    ] {
        assert_eq!(
            stdout(&w.exec("off", &py(&w, body), &[])),
            "EACCES",
            "{body}"
        );
    }
    // Unix sockets keep working (the bypass socket is one)
    let unix = py(
        &w,
        "a, b = socket.socketpair()\na.send(b'x')\nassert b.recv(1) == b'x'",
    );
    assert_eq!(stdout(&w.exec("off", &unix, &[])), "OK");
    let netlink = py(&w, "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)");
    assert_eq!(stdout(&w.exec("off", &netlink, &[])), "OK");
    // with the network on, the same UDP send works and arrives
    w.py_profile("open", &[], "network:\n  unrestricted: true\n");
    assert_eq!(stdout(&w.exec("open", &send, &[])), "OK");
    receiver
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 8];
    let (n, _) = receiver.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hi");
}
