//! The `read` tool on images: real PNG and JPEG files generated here, read through the tool
//! over the disk file system, compared with what Pi 0.73.1's `resizeImage` does (limits 2000×2000
//! pixels and 4.5 MB of base64; PNG first, then JPEG qualities; EXIF orientation; notes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Cursor;
use std::sync::Arc;

use base64::Engine as _;
use image::{DynamicImage, ImageFormat, RgbImage, RgbaImage};
use pi_ai::ContentBlock;
use pi_core::agent::{ToolContext, ToolOutput};
use pi_core::fs::DiskFs;
use pi_core::tools::{tools_with_state, ToolState};
use serde_json::json;
use tokio_util::sync::CancellationToken;

mod common;
use common::{tmp_dir, Tmp};

fn temp_dir() -> Tmp {
    tmp_dir("pi-tools-read-")
}

async fn read(dir: &std::path::Path, path: &str) -> ToolOutput {
    let tools = tools_with_state(
        Arc::new(DiskFs::new(dir.to_path_buf())),
        None,
        Arc::new(ToolState::default()),
    );
    let t = tools.iter().find(|t| t.spec().name == "read").unwrap();
    let ctx = ToolContext {
        call_id: "call_1".into(),
        turn: 1,
        cancel: CancellationToken::new(),
        on_update: Arc::new(|_| {}),
        model_input: None,
    };
    t.execute(ctx, json!({ "path": path })).await.unwrap()
}

/// (text of the first block, decoded image bytes and MIME type of the second, if any).
fn parts(out: &ToolOutput) -> (String, Option<(Vec<u8>, String)>) {
    let text = match &out.content[0] {
        ContentBlock::Text(t) => t.text.clone(),
        other => panic!("first block is not text: {other:?}"),
    };
    let image = out.content.get(1).map(|b| match b {
        ContentBlock::Image(i) => (
            base64::engine::general_purpose::STANDARD
                .decode(&*i.data)
                .unwrap(),
            i.mime_type.clone(),
        ),
        other => panic!("second block is not an image: {other:?}"),
    });
    assert!(out.content.len() <= 2);
    (text, image)
}

fn encode(img: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Vec::new();
    img.write_to(&mut Cursor::new(&mut out), format).unwrap();
    out
}

/// A smooth gradient (compresses well).
fn gradient(w: u32, h: u32) -> DynamicImage {
    DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, 128])
    }))
}

/// Pseudo-random noise (does not compress).
fn noise(w: u32, h: u32) -> DynamicImage {
    let mut s: u32 = 0x1234_5678;
    DynamicImage::ImageRgba8(RgbaImage::from_fn(w, h, |_, _| {
        let mut px = [0u8; 4];
        for p in &mut px {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            *p = (s >> 24) as u8;
        }
        image::Rgba(px)
    }))
}

fn dims(bytes: &[u8]) -> (u32, u32) {
    let img = image::load_from_memory(bytes).unwrap();
    (img.width(), img.height())
}

#[tokio::test]
async fn small_png_is_sent_unchanged_whatever_its_name() {
    let dir = temp_dir();
    let png = encode(&gradient(40, 30), ImageFormat::Png);
    std::fs::write(dir.join("shot.png"), &png).unwrap();
    // Pi recognises images by content: a PNG named .txt is an image too.
    std::fs::write(dir.join("not-text.txt"), &png).unwrap();
    for name in ["shot.png", "not-text.txt"] {
        let (text, image) = parts(&read(&dir, name).await);
        assert_eq!(text, "Read image file [image/png]");
        assert_eq!(image, Some((png.clone(), "image/png".to_string())));
    }
}

#[tokio::test]
async fn large_png_is_scaled_to_fit_2000_with_the_dimension_note() {
    let dir = temp_dir();
    std::fs::write(
        dir.join("wide.png"),
        encode(&gradient(3000, 1500), ImageFormat::Png),
    )
    .unwrap();
    let (text, image) = parts(&read(&dir, "wide.png").await);
    assert_eq!(
        text,
        "Read image file [image/png]\n[Image: original 3000x1500, displayed at 2000x1000. Multiply coordinates by 1.50 to map to original image.]"
    );
    let (bytes, mime) = image.unwrap();
    assert_eq!(mime, "image/png");
    assert_eq!(dims(&bytes), (2000, 1000));
}

#[tokio::test]
async fn too_many_bytes_falls_back_to_jpeg_at_the_same_size() {
    let dir = temp_dir();
    // 1200×1200 RGBA noise: a PNG over 4.5 MB of base64, within 2000×2000 pixels.
    let png = encode(&noise(1200, 1200), ImageFormat::Png);
    assert!(png.len() * 4 / 3 > 4_718_592, "{}", png.len());
    std::fs::write(dir.join("noise.png"), &png).unwrap();
    let (text, image) = parts(&read(&dir, "noise.png").await);
    // Pi marks any re-encoded image as resized, so the note says 1.00.
    assert_eq!(
        text,
        "Read image file [image/jpeg]\n[Image: original 1200x1200, displayed at 1200x1200. Multiply coordinates by 1.00 to map to original image.]"
    );
    let (bytes, mime) = image.unwrap();
    assert_eq!(mime, "image/jpeg");
    assert_eq!(&bytes[..3], &[0xFF, 0xD8, 0xFF]);
    assert!(bytes.len() * 4 / 3 < 4_718_592);
    assert_eq!(dims(&bytes), (1200, 1200));
}

/// A JPEG with an EXIF APP1 segment saying "rotate 90° clockwise" (orientation 6).
fn jpeg_with_orientation_6(img: &DynamicImage) -> Vec<u8> {
    let jpeg = encode(img, ImageFormat::Jpeg);
    let mut tiff = b"MM\0\x2a\0\0\0\x08".to_vec();
    tiff.extend_from_slice(&[0, 1]); // one IFD entry
    tiff.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0]); // Orientation = 6
    tiff.extend_from_slice(&[0, 0, 0, 0]); // no next IFD
    let mut app1 = b"Exif\0\0".to_vec();
    app1.extend_from_slice(&tiff);
    let len = (app1.len() + 2) as u16;
    let mut out = vec![0xFF, 0xD8, 0xFF, 0xE1];
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&app1);
    out.extend_from_slice(&jpeg[2..]);
    out
}

#[tokio::test]
async fn jpeg_is_turned_upright_before_it_is_scaled() {
    let dir = temp_dir();
    std::fs::write(
        dir.join("photo.jpg"),
        jpeg_with_orientation_6(&gradient(2400, 1200)),
    )
    .unwrap();
    let (text, image) = parts(&read(&dir, "photo.jpg").await);
    // Upright it is 1200×2400, scaled to 1000×2000; sent as the smaller of PNG and JPEG at
    // quality 80 (Pi 1.6's `resizeImage`): the gradient's JPEG.
    assert_eq!(
        text,
        "Read image file [image/jpeg]\n[Image: original 1200x2400, displayed at 1000x2000. Multiply coordinates by 1.20 to map to original image.]"
    );
    let (bytes, mime) = image.unwrap();
    assert_eq!(mime, "image/jpeg");
    assert_eq!(dims(&bytes), (1000, 2000));
}

#[tokio::test]
async fn undecodable_image_is_omitted_with_pis_note() {
    let dir = temp_dir();
    // A PNG by Pi 1.6's detection (signature and `IHDR` header), then nothing decodable.
    let mut bad = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    bad.extend_from_slice(&[0; 17]);
    bad.extend_from_slice(b"not really a png");
    std::fs::write(dir.join("broken.png"), &bad).unwrap();
    let (text, image) = parts(&read(&dir, "broken.png").await);
    assert_eq!(
        text,
        "Read image file [image/png]\n[Image omitted: could not be resized below the inline image size limit.]"
    );
    assert_eq!(image, None);
}

/// Pi's `getNonVisionImageNote`: with a model whose `input` lacks `image` the note follows the
/// text block's first line (also after the dimension note); with an image model or no model
/// there is none. The image block stays (the request view replaces it).
#[tokio::test]
async fn image_for_a_model_without_image_input_carries_pis_note() {
    let dir = temp_dir();
    std::fs::write(
        dir.join("small.png"),
        encode(&gradient(40, 30), ImageFormat::Png),
    )
    .unwrap();
    std::fs::write(
        dir.join("big.png"),
        encode(&gradient(3000, 1500), ImageFormat::Png),
    )
    .unwrap();
    let note =
        "[Current model does not support images. The image will be omitted from this request.]";
    let tools = tools_with_state(
        Arc::new(DiskFs::new(dir.to_path_buf())),
        None,
        Arc::new(ToolState::default()),
    );
    let t = tools.iter().find(|t| t.spec().name == "read").unwrap();
    let run = |path: &'static str, input: Option<Vec<&str>>| {
        let ctx = ToolContext {
            call_id: "call_1".into(),
            turn: 1,
            cancel: CancellationToken::new(),
            on_update: Arc::new(|_| {}),
            model_input: input.map(|v| v.into_iter().map(String::from).collect()),
        };
        t.execute(ctx, json!({ "path": path }))
    };
    let out = run("small.png", Some(vec!["text"])).await.unwrap();
    let (text, image) = parts(&out);
    assert_eq!(text, format!("Read image file [image/png]\n{note}"));
    assert_eq!(image.unwrap().1, "image/png");
    let out = run("big.png", Some(vec!["text"])).await.unwrap();
    assert_eq!(
        parts(&out).0,
        format!("Read image file [image/png]\n[Image: original 3000x1500, displayed at 2000x1000. Multiply coordinates by 1.50 to map to original image.]\n{note}")
    );
    for input in [Some(vec!["text", "image"]), None] {
        let out = run("small.png", input).await.unwrap();
        assert_eq!(parts(&out).0, "Read image file [image/png]");
    }
}

/// Pi 1.6 reads BMP (`read`'s description names it): detected by its header, sent as PNG with
/// "[Image converted from image/bmp to image/png.]"; a `BM` file whose header does not hold
/// together is text.
#[tokio::test]
async fn bmp_is_sent_as_png_with_the_conversion_hint() {
    let dir = temp_dir();
    let img = gradient(40, 30);
    let bmp = encode(&img, ImageFormat::Bmp);
    std::fs::write(dir.join("shot.bmp"), &bmp).unwrap();
    let (text, image) = parts(&read(&dir, "shot.bmp").await);
    assert_eq!(
        text,
        "Read image file [image/png]\n[Image converted from image/bmp to image/png.]"
    );
    let (png, mime) = image.unwrap();
    assert_eq!(mime, "image/png");
    assert_eq!(image::guess_format(&png).unwrap(), ImageFormat::Png);
    assert_eq!(
        image::load_from_memory(&png).unwrap().to_rgb8(),
        img.to_rgb8()
    );
    std::fs::write(dir.join("bm.txt"), "BM is not a bitmap\n").unwrap();
    let (text, image) = parts(&read(&dir, "bm.txt").await);
    assert_eq!(text, "BM is not a bitmap\n");
    assert_eq!(image, None);
}
