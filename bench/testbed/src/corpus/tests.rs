use std::collections::BTreeSet;

use super::*;

fn generated(seed: u64) -> (tempfile::TempDir, Vec<GeneratedPage>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pages = generate(dir.path(), seed).expect("the corpus generates");
    (dir, pages)
}

#[test]
fn corpus_same_seed_same_bytes_other_seed_other_bytes() {
    let (a, pages_a) = generated(7);
    let (b, pages_b) = generated(7);
    let (c, _) = generated(8);
    let tree_a = read_tree(a.path()).expect("tree a");
    let tree_b = read_tree(b.path()).expect("tree b");
    let tree_c = read_tree(c.path()).expect("tree c");
    assert_eq!(pages_a, pages_b);
    assert!(tree_a.len() > 100, "only {} files", tree_a.len());
    assert!(tree_a == tree_b, "the same seed gave different files");
    assert_eq!(
        tree_a.keys().collect::<Vec<_>>(),
        tree_c.keys().collect::<Vec<_>>(),
        "another seed changes the bytes, not the file names"
    );
    let differing = tree_a
        .iter()
        .filter(|(path, bytes)| tree_c.get(*path) != Some(*bytes))
        .count();
    assert_eq!(
        differing,
        tree_a.len(),
        "every file differs with another seed"
    );
}

#[test]
fn corpus_pages_meet_their_profiles_figures() {
    let (dir, pages) = generated(1);
    assert_eq!(pages.len(), PROFILES.len());
    for (page, profile) in pages.iter().zip(PROFILES) {
        assert_eq!(page.name, profile.name);
        assert_eq!(page.url_path, format!("/{}/", profile.name));
        assert_eq!(page.objects[0].kind, ObjectKind::Html);
        assert_eq!(page.objects[0].path, page.url_path);
        for kind in ObjectKind::ALL {
            let objects: Vec<_> = page.of_kind(kind).collect();
            let figure = profile.figure(kind);
            assert_eq!(objects.len() as u32, figure.count, "{} {kind:?}", page.name);
            let bytes: u64 = objects.iter().map(|o| o.bytes).sum();
            assert_eq!(bytes, figure.bytes, "{} {kind:?} bytes", page.name);
            for object in objects {
                assert!(object.bytes >= MIN_OBJECT_BYTES.min(figure.bytes));
            }
        }
        assert_eq!(page.total_bytes(), profile.total_bytes());
        assert_eq!(page.objects.len() as u32, profile.total_count());
        assert_eq!(page.max_depth(), 2);
        assert_eq!(
            page.at_depth(2)
                .filter(|o| o.kind == ObjectKind::Image)
                .count() as u32,
            profile.background_images
        );
        // The spread is real: the largest script is several times the smallest.
        let js: Vec<u64> = page.of_kind(ObjectKind::Js).map(|o| o.bytes).collect();
        let (min, max) = (
            js.iter().min().copied().unwrap_or(0),
            js.iter().max().copied().unwrap_or(0),
        );
        assert!(
            max > 3 * min,
            "{}: scripts from {min} to {max} bytes",
            page.name
        );
        // The descriptions are the files.
        for object in &page.objects {
            let path = if object.kind == ObjectKind::Html {
                format!("{}index.html", object.path)
            } else {
                object.path.clone()
            };
            let len = std::fs::metadata(file_of(dir.path(), &path))
                .expect("the object's file exists")
                .len();
            assert_eq!(len, object.bytes, "{path}");
        }
    }
}

#[test]
fn corpus_html_references_exactly_depth_1_and_css_exactly_depth_2() {
    let (dir, pages) = generated(2);
    for page in &pages {
        let described = describe_dir(dir.path(), &page.url_path).expect("the page is described");
        let set = |p: &GeneratedPage, depth: u8| -> BTreeSet<(String, ObjectKind, u64)> {
            p.at_depth(depth)
                .map(|o| (o.path.clone(), o.kind, o.bytes))
                .collect()
        };
        for depth in 0..=2 {
            assert_eq!(
                set(&described, depth),
                set(page, depth),
                "{} depth {depth}",
                page.name
            );
        }
        assert_eq!(described.objects.len(), page.objects.len());

        // Directly too: the HTML names no depth-2 object, each stylesheet only them.
        let html = std::fs::read_to_string(dir.path().join(&page.name).join("index.html"))
            .expect("the HTML is UTF-8");
        let from_html: BTreeSet<String> = html_references(&html)
            .iter()
            .filter_map(|r| resolve(&page.url_path, r))
            .collect();
        let depth1: BTreeSet<String> = page.at_depth(1).map(|o| o.path.clone()).collect();
        assert_eq!(from_html, depth1, "{}", page.name);
        let mut from_css = BTreeSet::new();
        for css in page.of_kind(ObjectKind::Css) {
            let text = std::fs::read_to_string(file_of(dir.path(), &css.path)).expect("CSS");
            from_css.extend(
                css_references(&text)
                    .iter()
                    .filter_map(|r| resolve(&css.path, r)),
            );
        }
        let depth2: BTreeSet<String> = page.at_depth(2).map(|o| o.path.clone()).collect();
        assert_eq!(from_css, depth2, "{}", page.name);
    }
}

#[test]
fn corpus_text_files_are_well_formed() {
    let (dir, pages) = generated(3);
    for page in &pages {
        for object in &page.objects {
            let path = match object.kind {
                ObjectKind::Html => format!("{}index.html", object.path),
                ObjectKind::Css | ObjectKind::Js => object.path.clone(),
                ObjectKind::Image | ObjectKind::Font => continue,
            };
            let text = std::fs::read_to_string(file_of(dir.path(), &path))
                .unwrap_or_else(|e| panic!("{path} is not UTF-8: {e}"));
            match object.kind {
                ObjectKind::Html => {
                    assert!(text.starts_with("<!doctype html>\n"), "{path}");
                    assert!(text.ends_with("</html>\n"), "{path}");
                    // Every comment closes where it was meant to.
                    assert_eq!(text.matches("<!--").count(), text.matches("-->").count());
                    assert_eq!(text.matches("--").count(), 2 * text.matches("<!--").count());
                }
                _ => {
                    assert_eq!(
                        text.matches("/*").count(),
                        text.matches("*/").count(),
                        "{path}"
                    );
                }
            }
            // The padding is random: no long run repeats.
            if object.bytes > 8 * 1024 {
                let lines: BTreeSet<&str> = text.lines().filter(|l| l.len() == 76).collect();
                assert!(lines.len() * 76 * 2 > text.len(), "{path}: padding repeats");
            }
        }
    }
}

/// Checks a PNG as a decoder would: signature, chunk lengths and CRCs, IHDR
/// first and IEND last, the zlib stream of the IDAT chunks inflated (stored
/// blocks, which is what the generator writes) with its Adler-32, and one
/// filtered scanline per row. Returns the width and height.
fn decode_png(bytes: &[u8]) -> Result<(u32, u32), String> {
    if bytes.get(..8) != Some(&PNG_SIGNATURE[..]) {
        return Err("no PNG signature".into());
    }
    let mut at = 8;
    let mut chunks = Vec::new();
    let mut idat = Vec::new();
    while at < bytes.len() {
        let header = bytes.get(at..at + 8).ok_or("a cut chunk header")?;
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let kind: [u8; 4] = [header[4], header[5], header[6], header[7]];
        let data = bytes.get(at + 8..at + 8 + len).ok_or("a cut chunk")?;
        let crc = bytes.get(at + 8 + len..at + 12 + len).ok_or("a cut CRC")?;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&kind);
        hasher.update(data);
        if hasher.finalize().to_be_bytes() != crc {
            return Err(format!("bad CRC on {}", String::from_utf8_lossy(&kind)));
        }
        if &kind == b"IDAT" {
            idat.extend_from_slice(data);
        }
        if kind[0].is_ascii_uppercase() && !matches!(&kind, b"IHDR" | b"IDAT" | b"IEND") {
            return Err(format!(
                "unknown critical chunk {}",
                String::from_utf8_lossy(&kind)
            ));
        }
        chunks.push((kind, data));
        at += 12 + len;
    }
    let (first, ihdr) = chunks.first().ok_or("no chunks")?;
    if first != b"IHDR" || ihdr.len() != 13 {
        return Err("IHDR is not first".into());
    }
    if chunks.last().map(|c| &c.0) != Some(b"IEND") {
        return Err("IEND is not last".into());
    }
    let width = u32::from_be_bytes([ihdr[0], ihdr[1], ihdr[2], ihdr[3]]);
    let height = u32::from_be_bytes([ihdr[4], ihdr[5], ihdr[6], ihdr[7]]);
    if ihdr[8..] != [8, 2, 0, 0, 0] {
        return Err(format!("unexpected IHDR {:?}", &ihdr[8..]));
    }
    // zlib: header, stored blocks, Adler-32.
    if idat.len() < 6 || (u16::from(idat[0]) << 8 | u16::from(idat[1])) % 31 != 0 {
        return Err("bad zlib header".into());
    }
    let mut raw = Vec::new();
    let mut at = 2;
    loop {
        let header = *idat.get(at).ok_or("cut deflate block")?;
        if header >> 1 != 0 {
            return Err("not a stored block".into());
        }
        let len = u16::from_le_bytes([idat[at + 1], idat[at + 2]]);
        let nlen = u16::from_le_bytes([idat[at + 3], idat[at + 4]]);
        if len != !nlen {
            return Err("LEN and NLEN disagree".into());
        }
        let data = idat
            .get(at + 5..at + 5 + len as usize)
            .ok_or("cut stored block")?;
        raw.extend_from_slice(data);
        at += 5 + len as usize;
        if header & 1 == 1 {
            break;
        }
    }
    if idat.get(at..) != Some(&adler32(&raw).to_be_bytes()[..]) {
        return Err("bad Adler-32 or trailing bytes".into());
    }
    let row = 1 + 3 * width as usize;
    if raw.len() != row * height as usize {
        return Err(format!("{} pixel bytes for {width}x{height}", raw.len()));
    }
    if raw.chunks(row).any(|line| line[0] > 4) {
        return Err("bad filter byte".into());
    }
    Ok((width, height))
}

#[test]
fn corpus_every_png_decodes() {
    let (dir, pages) = generated(4);
    let mut checked = 0;
    for page in &pages {
        for image in page.of_kind(ObjectKind::Image) {
            let bytes = std::fs::read(file_of(dir.path(), &image.path)).expect("the image");
            let (width, height) =
                decode_png(&bytes).unwrap_or_else(|e| panic!("{}: {e}", image.path));
            assert_eq!(width * 9, height * 16, "{}: 16:9", image.path);
            checked += 1;
        }
    }
    assert_eq!(checked, PROFILES.iter().map(|p| p.image.count).sum::<u32>());
    // The checker itself rejects a broken file.
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut good = png(4096, &mut rng, Path::new("x")).expect("a PNG");
    assert_eq!(good.len(), 4096);
    assert!(decode_png(&good).is_ok());
    good[40] ^= 1;
    assert!(decode_png(&good).is_err());
}

#[test]
fn corpus_sizes_split_exactly() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let sizes = split(
        &mut rng,
        KindFigure {
            count: 10,
            bytes: 100_000,
        },
        Path::new("x"),
    )
    .expect("splits");
    assert_eq!(sizes.len(), 10);
    assert_eq!(sizes.iter().sum::<u64>(), 100_000);
    assert!(sizes.iter().all(|s| *s >= MIN_OBJECT_BYTES));
    assert!(
        split(
            &mut rng,
            KindFigure {
                count: 10,
                bytes: 5_000
            },
            Path::new("x")
        )
        .is_err()
    );
    assert!(
        split(&mut rng, KindFigure { count: 0, bytes: 0 }, Path::new("x"))
            .expect("nothing to split")
            .is_empty()
    );
    for n in [0, 1, 7, 8, 9, 200] {
        assert_eq!(padding(n, "/*\n", "\n*/\n", &mut rng).len(), n);
    }
}

fn page(objects: &[(u64, u8)]) -> GeneratedPage {
    GeneratedPage {
        name: "hand".into(),
        url_path: "/".into(),
        objects: objects
            .iter()
            .enumerate()
            .map(|(i, (bytes, depth))| ObjectSpec {
                path: format!("/{i}"),
                kind: ObjectKind::Image,
                bytes: *bytes,
                depth: *depth,
            })
            .collect(),
    }
}

#[test]
fn the_floor_is_one_round_trip_and_the_bytes_and_discovery_adds_handshakes_and_levels() {
    // Two levels below the HTML, 1 MB in all, 10 Mbit/s and 50 ms.
    let link = Link {
        rtt: Duration::from_millis(50),
        rate_bits_per_second: 10_000_000,
    };
    let two_levels = page(&[(100_000, 0), (600_000, 1), (200_000, 1), (100_000, 2)]);
    // 50 ms + 800 ms.
    assert_eq!(floor(&two_levels, &link), Duration::from_millis(850));
    // No handshake (a connection already up): the HTML and two levels.
    assert_eq!(
        discovery_bound(&two_levels, &link, 0),
        Duration::from_millis(950)
    );
    // TCP and TLS 1.3 first.
    assert_eq!(
        discovery_bound(&two_levels, &link, 2),
        Duration::from_millis(1050)
    );
    assert_eq!(
        lower_bound(&two_levels, &link),
        discovery_bound(&two_levels, &link, 1)
    );
    let stopped = Link {
        rtt: Duration::from_millis(1),
        rate_bits_per_second: 0,
    };
    assert_eq!(floor(&two_levels, &stopped), Duration::MAX);
}

#[test]
fn corpus_lower_bound_by_hand() {
    // HTML only, 1,000 bytes at 8 Mbit/s and 100 ms: 2 round trips + 1 ms.
    let link = Link {
        rtt: Duration::from_millis(100),
        rate_bits_per_second: 8_000_000,
    };
    assert_eq!(
        lower_bound(&page(&[(1000, 0)]), &link),
        Duration::from_millis(201)
    );
    // Two levels below the HTML, 1 MB in all, 10 Mbit/s and 50 ms:
    // 4 × 50 ms + 8,000,000 bits / 10 Mbit/s = 200 ms + 800 ms.
    let link = Link {
        rtt: Duration::from_millis(50),
        rate_bits_per_second: 10_000_000,
    };
    let two_levels = page(&[(100_000, 0), (600_000, 1), (200_000, 1), (100_000, 2)]);
    assert_eq!(two_levels.total_bytes(), 1_000_000);
    assert_eq!(two_levels.max_depth(), 2);
    assert_eq!(lower_bound(&two_levels, &link), Duration::from_secs(1));
    // A rate that does not divide evenly: 3 bytes at 7 bit/s is 24/7 s.
    let link = Link {
        rtt: Duration::ZERO,
        rate_bits_per_second: 7,
    };
    assert_eq!(
        lower_bound(&page(&[(3, 0)]), &link),
        Duration::from_nanos(3_428_571_428)
    );
    let stopped = Link {
        rtt: Duration::from_millis(1),
        rate_bits_per_second: 0,
    };
    assert_eq!(lower_bound(&page(&[(1, 0)]), &stopped), Duration::MAX);
}

#[test]
fn corpus_p50_lower_bound_over_a_slow_link() {
    let (_dir, pages) = generated(5);
    let p50 = pages.iter().find(|p| p.name == "p50").expect("a p50 page");
    let link = Link {
        rtt: Duration::from_millis(80),
        rate_bits_per_second: 20_000_000,
    };
    // 1,903 KiB at 20 Mbit/s is 779.5 ms; 4 round trips of 80 ms.
    let bytes = (18 + 80 + 620 + 1054 + 131) * 1024u64;
    assert_eq!(p50.total_bytes(), bytes);
    let expected = Duration::from_millis(320) + Duration::from_nanos(bytes * 8 * 50);
    assert_eq!(lower_bound(p50, &link), expected);
}

#[test]
fn corpus_describes_the_demo_site() {
    let site = crate::demo_site();
    let page = describe_dir(&site, "/").expect("the demo site is described");
    assert_eq!(page.objects[0].path, "/");
    assert_eq!(page.of_kind(ObjectKind::Css).count(), 2);
    assert_eq!(page.of_kind(ObjectKind::Js).count(), 2);
    assert_eq!(page.of_kind(ObjectKind::Image).count(), 32);
    assert_eq!(page.max_depth(), 1);
    assert!(page.objects.iter().any(|o| o.path == "/assets/tile-32.svg"));
    let on_disk: u64 = page
        .objects
        .iter()
        .map(|o| {
            let path = if o.path == "/" {
                "/index.html"
            } else {
                &o.path
            };
            std::fs::metadata(file_of(&site, path))
                .expect("a file")
                .len()
        })
        .sum();
    assert_eq!(page.total_bytes(), on_disk);
    assert_eq!(
        describe_dir(&site, "/index.html")
            .expect("by file name")
            .total_bytes(),
        on_disk
    );
    assert!(describe_dir(&site, "index.html").is_err());
    assert!(describe_dir(&site, "/missing/").is_err());
}

#[test]
fn corpus_describe_dir_follows_css_and_reports_missing_files() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let write = |path: &str, text: &str| {
        let file = dir.path().join(path);
        std::fs::create_dir_all(file.parent().expect("a parent")).expect("mkdir");
        std::fs::write(file, text).expect("write");
    };
    write(
        "a/index.html",
        "<!doctype html><link rel=stylesheet href='s/x.css'><!-- <img src=no.png> -->\
         <script>var s = '<img src=\"no.png\">';</script><img src=\"/i.png\" alt=x>\
         <img src=\"data:image/png;base64,AA\"><img src=\"http://else.test/y.png\">\
         <a href=\"page.html\">link</a>",
    );
    write(
        "a/s/x.css",
        "/* url(no.png) */ @import \"y.css\"; .a { background: url( '../../i.png' ) }",
    );
    write("a/s/y.css", "@font-face { src: url(f.woff2?v=1#x) }");
    write("a/s/f.woff2", "font");
    write("i.png", "png");
    let page = describe_dir(dir.path(), "/a/").expect("described");
    let found: Vec<(&str, u8)> = page
        .objects
        .iter()
        .map(|o| (o.path.as_str(), o.depth))
        .collect();
    assert_eq!(
        found,
        [
            ("/a/", 0),
            ("/a/s/x.css", 1),
            ("/i.png", 1),
            ("/a/s/y.css", 2),
            ("/a/s/f.woff2", 3)
        ]
    );
    std::fs::remove_file(dir.path().join("i.png")).expect("remove");
    let error = describe_dir(dir.path(), "/a/").expect_err("a missing file");
    assert!(error.to_string().contains("/i.png"), "{error}");
}

#[test]
fn corpus_resolves_references_like_a_browser() {
    assert_eq!(
        resolve("/p50/", "css/0.css").as_deref(),
        Some("/p50/css/0.css")
    );
    assert_eq!(
        resolve("/p50/css/0.css", "../font/1.woff2").as_deref(),
        Some("/p50/font/1.woff2")
    );
    assert_eq!(
        resolve("/a/b.html", "/c.png?x#y").as_deref(),
        Some("/c.png")
    );
    assert_eq!(resolve("/", "../../x.png").as_deref(), Some("/x.png"));
    assert_eq!(resolve("/", "a/./b.png").as_deref(), Some("/a/b.png"));
    assert_eq!(resolve("/", "data:image/png;base64,AA"), None);
    assert_eq!(resolve("/", "https://else.test/x.png"), None);
    assert_eq!(resolve("/", "//else.test/x.png"), None);
    assert_eq!(resolve("/", "#top"), None);
    assert_eq!(resolve("/", "a:b/c.png"), None);
    assert_eq!(resolve("/", "a/b:c.png").as_deref(), Some("/a/b:c.png"));
}

#[test]
fn corpus_files_are_dated_a_month_back_so_caches_find_them_fresh() {
    let (dir, _) = generated(3);
    let tree = read_tree(dir.path()).expect("tree");
    let now = std::time::SystemTime::now();
    for path in tree.keys() {
        let modified = std::fs::metadata(dir.path().join(path))
            .and_then(|meta| meta.modified())
            .expect("a modification time");
        let age = now.duration_since(modified).expect("dated in the past");
        assert!(
            age >= FILE_AGE && age < FILE_AGE + Duration::from_secs(600),
            "{} is {age:?} old, not {FILE_AGE:?}",
            path.display()
        );
    }
}

#[test]
fn the_script_driven_page_keeps_the_objects_and_hides_all_but_the_css_from_its_html() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pages = generate(dir.path(), 7).expect("corpus");
    let p50 = pages.iter().find(|p| p.name == "p50").expect("p50");
    let js = script_driven(dir.path(), p50).expect("js50");
    assert_eq!((js.name.as_str(), js.url_path.as_str()), ("js50", "/js50/"));
    // Every object of p50 but its HTML, plus the new HTML, app.js and the list.
    assert_eq!(js.objects.len(), p50.objects.len() + 2);
    let html = std::fs::read_to_string(dir.path().join("js50/index.html")).expect("html");
    assert!(
        !html.contains("<img ") && !html.contains("<script src=\"js/"),
        "{html}"
    );
    assert!(html.contains("<base href=\"/p50/\">") && html.contains("/js50/app.js"));
    assert!(html.contains("css/0.css"), "the stylesheets stay");
    let list = std::fs::read_to_string(dir.path().join("js50/images.json")).expect("list");
    let app = std::fs::read_to_string(dir.path().join("js50/app.js")).expect("app");
    for o in &p50.objects {
        match (o.kind, o.depth) {
            (ObjectKind::Image, 1) => assert!(list.contains(&o.path), "{} listed", o.path),
            (ObjectKind::Js, _) => assert!(app.contains(&o.path), "{} imported", o.path),
            _ => {}
        }
    }
    // The inserted images are the deepest level.
    assert_eq!(js.max_depth(), 3);
    assert!(
        js.objects
            .iter()
            .filter(|o| o.depth == 3)
            .all(|o| o.kind == ObjectKind::Image)
    );
    assert!(
        script_driven(
            dir.path(),
            &GeneratedPage {
                name: "demo".into(),
                ..p50.clone()
            }
        )
        .is_err()
    );
}
