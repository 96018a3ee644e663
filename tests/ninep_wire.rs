//! Property tests of the 9P2000 codec: round trips for every message type, no panics
//! on arbitrary or mutated bytes, and byte-for-byte agreement with the `ninep` crate.

use ninep::sansio::protocol::{self as np, NineP};
use proptest::prelude::*;
use proptest::strategy::Union;
use toolsrv::ninep::fs::{Qid, Stat};
use toolsrv::ninep::wire::{Fcall, Msg, decode, decode_stats, encode, encode_stat};

fn s() -> impl Strategy<Value = String> {
    "\\PC{0,12}"
}

fn qid() -> impl Strategy<Value = Qid> {
    (
        prop::sample::select(vec![0x00u8, 0x80, 0x40, 0x20, 0x08, 0x04]),
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(|(ty, version, path)| Qid { ty, version, path })
}

fn stat() -> impl Strategy<Value = Stat> {
    (
        (any::<u16>(), any::<u32>(), qid(), any::<u32>()),
        (any::<u32>(), any::<u32>(), any::<u64>()),
        (s(), s(), s(), s()),
    )
        .prop_map(
            |((ty, dev, qid, mode), (atime, mtime, length), (name, uid, gid, muid))| Stat {
                ty,
                dev,
                qid,
                mode,
                atime,
                mtime,
                length,
                name,
                uid,
                gid,
                muid,
            },
        )
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..64)
}

fn fcall() -> impl Strategy<Value = Fcall> {
    let u = any::<u32>;
    let arms: Vec<BoxedStrategy<Fcall>> = vec![
        (u(), s())
            .prop_map(|(msize, version)| Fcall::Tversion { msize, version })
            .boxed(),
        (u(), s())
            .prop_map(|(msize, version)| Fcall::Rversion { msize, version })
            .boxed(),
        (u(), s(), s())
            .prop_map(|(afid, uname, aname)| Fcall::Tauth { afid, uname, aname })
            .boxed(),
        qid().prop_map(|aqid| Fcall::Rauth { aqid }).boxed(),
        (u(), u(), s(), s())
            .prop_map(|(fid, afid, uname, aname)| Fcall::Tattach {
                fid,
                afid,
                uname,
                aname,
            })
            .boxed(),
        qid().prop_map(|qid| Fcall::Rattach { qid }).boxed(),
        s().prop_map(|ename| Fcall::Rerror { ename }).boxed(),
        any::<u16>()
            .prop_map(|oldtag| Fcall::Tflush { oldtag })
            .boxed(),
        Just(Fcall::Rflush).boxed(),
        (u(), u(), prop::collection::vec(s(), 0..=16))
            .prop_map(|(fid, newfid, wnames)| Fcall::Twalk {
                fid,
                newfid,
                wnames,
            })
            .boxed(),
        prop::collection::vec(qid(), 0..=16)
            .prop_map(|wqids| Fcall::Rwalk { wqids })
            .boxed(),
        (u(), any::<u8>())
            .prop_map(|(fid, mode)| Fcall::Topen { fid, mode })
            .boxed(),
        (qid(), u())
            .prop_map(|(qid, iounit)| Fcall::Ropen { qid, iounit })
            .boxed(),
        (u(), s(), u(), any::<u8>())
            .prop_map(|(fid, name, perm, mode)| Fcall::Tcreate {
                fid,
                name,
                perm,
                mode,
            })
            .boxed(),
        (qid(), u())
            .prop_map(|(qid, iounit)| Fcall::Rcreate { qid, iounit })
            .boxed(),
        (u(), any::<u64>(), u())
            .prop_map(|(fid, offset, count)| Fcall::Tread { fid, offset, count })
            .boxed(),
        data().prop_map(|data| Fcall::Rread { data }).boxed(),
        (u(), any::<u64>(), data())
            .prop_map(|(fid, offset, data)| Fcall::Twrite { fid, offset, data })
            .boxed(),
        u().prop_map(|count| Fcall::Rwrite { count }).boxed(),
        u().prop_map(|fid| Fcall::Tclunk { fid }).boxed(),
        Just(Fcall::Rclunk).boxed(),
        u().prop_map(|fid| Fcall::Tremove { fid }).boxed(),
        Just(Fcall::Rremove).boxed(),
        u().prop_map(|fid| Fcall::Tstat { fid }).boxed(),
        stat().prop_map(|stat| Fcall::Rstat { stat }).boxed(),
        (u(), stat())
            .prop_map(|(fid, stat)| Fcall::Twstat { fid, stat })
            .boxed(),
        Just(Fcall::Rwstat).boxed(),
    ];
    Union::new(arms)
}

fn msg() -> impl Strategy<Value = Msg> {
    (any::<u16>(), fcall()).prop_map(|(tag, body)| Msg { tag, body })
}

fn np_qid(q: &Qid) -> np::Qid {
    np::Qid {
        ty: np::FileType::new(q.ty),
        version: q.version,
        path: q.path,
    }
}

fn np_stat(st: &Stat) -> np::RawStat {
    let mut raw = np::RawStat {
        size: 0,
        ty: st.ty,
        dev: st.dev,
        qid: np_qid(&st.qid),
        mode: st.mode,
        atime: st.atime,
        mtime: st.mtime,
        length: st.length,
        name: st.name.clone(),
        uid: st.uid.clone(),
        gid: st.gid.clone(),
        muid: st.muid.clone(),
    };
    raw.size = (raw.n_bytes() - 2) as u16;
    raw
}

/// The same message encoded by the independent `ninep` crate.
fn ninep_bytes(m: &Msg) -> Vec<u8> {
    use np::{Rdata as R, Tdata as T};
    let t = |content| np::Tmessage::new(m.tag, content).write_9p_bytes().unwrap();
    let r = |content| {
        np::Rmessage {
            tag: m.tag,
            content,
        }
        .write_9p_bytes()
        .unwrap()
    };
    match m.body.clone() {
        Fcall::Tversion { msize, version } => t(T::Version { msize, version }),
        Fcall::Rversion { msize, version } => r(R::Version { msize, version }),
        Fcall::Tauth { afid, uname, aname } => t(T::Auth { afid, uname, aname }),
        Fcall::Rauth { aqid } => r(R::Auth {
            aqid: np_qid(&aqid),
        }),
        Fcall::Tattach {
            fid,
            afid,
            uname,
            aname,
        } => t(T::Attach {
            fid,
            afid,
            uname,
            aname,
        }),
        Fcall::Rattach { qid } => r(R::Attach { aqid: np_qid(&qid) }),
        Fcall::Rerror { ename } => r(R::Error { ename }),
        Fcall::Tflush { oldtag } => t(T::Flush { old_tag: oldtag }),
        Fcall::Rflush => r(R::Flush {}),
        Fcall::Twalk {
            fid,
            newfid,
            wnames,
        } => t(T::Walk {
            fid,
            new_fid: newfid,
            wnames,
        }),
        Fcall::Rwalk { wqids } => r(R::Walk {
            wqids: wqids.iter().map(np_qid).collect(),
        }),
        Fcall::Topen { fid, mode } => t(T::Open { fid, mode }),
        Fcall::Ropen { qid, iounit } => r(R::Open {
            qid: np_qid(&qid),
            iounit,
        }),
        Fcall::Tcreate {
            fid,
            name,
            perm,
            mode,
        } => t(T::Create {
            fid,
            name,
            perm,
            mode,
        }),
        Fcall::Rcreate { qid, iounit } => r(R::Create {
            qid: np_qid(&qid),
            iounit,
        }),
        Fcall::Tread { fid, offset, count } => t(T::Read { fid, offset, count }),
        Fcall::Rread { data } => r(R::Read { data: data.into() }),
        Fcall::Twrite { fid, offset, data } => t(T::Write {
            fid,
            offset,
            data: data.into(),
        }),
        Fcall::Rwrite { count } => r(R::Write { count }),
        Fcall::Tclunk { fid } => t(T::Clunk { fid }),
        Fcall::Rclunk => r(R::Clunk {}),
        Fcall::Tremove { fid } => t(T::Remove { fid }),
        Fcall::Rremove => r(R::Remove {}),
        Fcall::Tstat { fid } => t(T::Stat { fid }),
        Fcall::Rstat { stat } => {
            let stat = np_stat(&stat);
            r(R::Stat {
                size: stat.n_bytes() as u16,
                stat,
            })
        }
        Fcall::Twstat { fid, stat } => {
            let stat = np_stat(&stat);
            t(T::Wstat {
                fid,
                size: stat.n_bytes() as u16,
                stat,
            })
        }
        Fcall::Rwstat => r(R::Wstat {}),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_message_round_trips(m in msg()) {
        let frame = encode(&m).unwrap();
        prop_assert_eq!(frame.len(), u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize);
        prop_assert_eq!(decode(&frame).unwrap(), m);
    }

    #[test]
    fn encoding_matches_the_ninep_crate(m in msg()) {
        prop_assert_eq!(encode(&m).unwrap(), ninep_bytes(&m));
    }

    #[test]
    fn stat_entries_round_trip(stats in prop::collection::vec(stat(), 0..8)) {
        let mut buf = Vec::new();
        for st in &stats {
            encode_stat(st, &mut buf).unwrap();
        }
        prop_assert_eq!(decode_stats(&buf).unwrap(), stats);
    }

    #[test]
    fn decode_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
        let _ = decode_stats(&bytes);
    }

    #[test]
    fn decode_never_panics_on_mutated_frames(
        m in msg(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
        fix_size in any::<bool>(),
    ) {
        let mut frame = encode(&m).unwrap();
        for (at, byte) in edits {
            let i = at.index(frame.len());
            frame[i] = byte;
        }
        frame.truncate(cut.index(frame.len() + 1));
        if fix_size && frame.len() >= 4 {
            let n = frame.len() as u32;
            frame[..4].copy_from_slice(&n.to_le_bytes());
        }
        if let Ok(again) = decode(&frame) {
            // Whatever decodes re-encodes to something that decodes the same.
            prop_assert_eq!(decode(&encode(&again).unwrap()).unwrap(), again);
        }
    }
}

#[test]
fn encode_refuses_what_9p_cannot_carry() {
    let long = "x".repeat(70_000);
    assert!(
        encode(&Msg {
            tag: 1,
            body: Fcall::Rerror { ename: long }
        })
        .is_err()
    );
    let wnames = vec!["a".to_owned(); 17];
    let body = Fcall::Twalk {
        fid: 0,
        newfid: 1,
        wnames,
    };
    assert!(encode(&Msg { tag: 1, body }).is_err());
}
