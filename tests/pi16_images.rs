//! Images and the model choice as Pi 1.6.0 (`$PI16_REF_BIN`) makes them, compared whole: the
//! same workspace, settings and models.json run once by Pi (`pi -p`, or Pi in RPC mode) and
//! once here (`pi-lsp run`, or the LSP server) on the loopback model. Settings
//! `images.blockImages` (Pi 1.6's `convertToLlm` wrapper in `core/sdk.js`), the resized
//! image's format (`utils/image-resize-core.js`), settings `enabledModels`
//! (`core/model-resolver.js`, `AgentSession.cycleModel`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use pi_e2e::headless::{assert_success, pi_bare_command, run};
use pi_e2e::lsp_client::agent_env;
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi16_bin, pi16_package, pi_lsp_bin, TempDir};
use serde_json::{json, Value};

/// The loopback model's models.json with its chat-completions model taking images.
fn image_models(mock: &MockModel) -> Value {
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"][0]["input"] = json!(["text", "image"]);
    models
}

/// One workspace `ws` (holding `files`) and agent dir (`models`, `settings`) run by Pi 1.6.0
/// (`pi -p --no-session ARGS`, tools read, bash, edit, write) and by pi-lsp (`pi-lsp run
/// --no-session ARGS`, the same tools), the loopback model answering each side with `steps`:
/// the request bodies (Pi's, ours).
#[allow(clippy::too_many_arguments)]
async fn both(
    pi: &Path,
    name: &str,
    models: impl Fn(&MockModel) -> Value,
    settings: Value,
    files: &[(&str, Vec<u8>)],
    steps: &[Step],
    args: &[&str],
) -> (Vec<Value>, Vec<Value>) {
    let tmp = TempDir::new(name);
    let root = tmp.path();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    for (file, bytes) in files {
        std::fs::write(ws.join(file), bytes).unwrap();
    }
    let script: Vec<Step> = steps.iter().chain(steps).cloned().collect();
    let mock = MockModel::start(script).await;
    let agent = root.join("agent");
    let package = pi16_package(pi).display().to_string();
    let env = agent_env(&agent, &models(&mock), &[("PI_PACKAGE_DIR", &package)]);
    std::fs::write(agent.join("settings.json"), settings.to_string()).unwrap();
    let tools = ["--tools", "read,bash,edit,write"];
    let mut cmd = pi_bare_command(pi, &ws, &agent, root);
    cmd.args(["-p", "--no-session"]).args(tools).args(args);
    assert_success(&tokio::task::block_in_place(|| cmd.output().unwrap()));
    let theirs = mock.requests().len();
    assert_success(&run(
        &ws,
        &env,
        &[&["--no-session"], &tools[..], args].concat(),
    ));
    let sent: Vec<Value> = mock.requests().into_iter().map(|r| r.body).collect();
    (sent[..theirs].to_vec(), sent[theirs..].to_vec())
}

/// A chat-completions body's conversation: its messages without the system / developer one.
fn conversation(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system" && m["role"] != "developer")
        .cloned()
        .collect()
}

/// A PNG of `w`×`h` pixels of one colour (the outside check's test image).
fn solid_png(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbImage::from_pixel(w, h, image::Rgb([200, 30, 30]));
    let mut out = Vec::new();
    image::DynamicImage::ImageRgb8(img)
        .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

/// The workspace path as both sides write it in a prompt's `@file` text.
fn ws_of(body: &Value) -> Option<PathBuf> {
    let text = body["messages"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == "user")?["content"]
        .as_array()?
        .iter()
        .find_map(|p| p["text"].as_str())?
        .to_string();
    let at = text.find("<file name=\"")? + "<file name=\"".len();
    let end = text[at..].find('"')?;
    Some(PathBuf::from(&text[at..at + end]).parent()?.to_path_buf())
}

/// Settings `images.blockImages: true`: an `@pic.png` prompt and a `read` of pic.png send
/// `Image reading is disabled.` where the image was, as Pi 1.6.0 sends them to a model that
/// takes images (its `convertToLlm` wrapper): the prompt's user message and the tool result
/// are the same as Pi's, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_images_sends_the_note_for_prompts_and_read_results() {
    let Some(pi) = pi16_bin("block_images_sends_the_note_for_prompts_and_read_results") else {
        return;
    };
    let settings = json!({"images": {"blockImages": true}});
    let files = [("pic.png", solid_png(8, 8))];
    let (theirs, ours) = both(
        &pi,
        "pi16img-block-atfile",
        image_models,
        settings.clone(),
        &files,
        &[Step::text("ok")],
        &["--model", "mock/mock-1", "@pic.png", "what"],
    )
    .await;
    assert_eq!((theirs.len(), ours.len()), (1, 1));
    let (theirs, ours) = (conversation(&theirs[0]), conversation(&ours[0]));
    assert_eq!(ours, theirs);
    let ws = ws_of(&json!({ "messages": ours })).unwrap();
    assert_eq!(
        ours,
        [json!({"role": "user", "content": [
            {"type": "text", "text": format!("<file name=\"{}\"></file>\nwhat", ws.join("pic.png").display())},
            {"type": "text", "text": "Image reading is disabled."}]})]
    );
    let steps = [
        Step::call("call_1", "read", json!({"path": "pic.png"})),
        Step::text("ok"),
    ];
    let (theirs, ours) = both(
        &pi,
        "pi16img-block-read",
        image_models,
        settings,
        &files,
        &steps,
        &["--model", "mock/mock-1", "read pic.png"],
    )
    .await;
    assert_eq!((theirs.len(), ours.len()), (2, 2));
    let (theirs, ours) = (conversation(&theirs[1]), conversation(&ours[1]));
    assert_eq!(ours, theirs);
    assert_eq!(
        ours[2..],
        [json!({"role": "tool", "tool_call_id": "call_1",
            "content": "Read image file [image/png]\nImage reading is disabled."})]
    );
}

/// The loopback model's models.json with a second chat-completions model, `mock-think`
/// (reasoning), and the Anthropic one.
fn three_models(mock: &MockModel) -> Value {
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "mock-think", "reasoning": true, "contextWindow": 128000, "maxTokens": 4096}));
    models
}

/// Settings `enabledModels` scope the model cycle as Pi 1.6.0's `cycle_model` (RPC) scopes
/// it: a new session starts at the first pattern's model, cycling goes through the patterns'
/// models only (mock/mock-1 is left out), a `:high` suffix gives its model that level and the
/// others keep the session's; `agent/model/cycle` gives the same models and levels, forward
/// and back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enabled_models_scope_the_cycle_as_pi() {
    let Some(pi) = pi16_bin("enabled_models_scope_the_cycle_as_pi") else {
        return;
    };
    let tmp = TempDir::new("pi16img-scope-cycle");
    let root = tmp.path();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![]).await;
    let agent = root.join("agent");
    let env = agent_env(&agent, &three_models(&mock), &[]);
    std::fs::write(
        agent.join("settings.json"),
        json!({"enabledModels": ["mockant/mock-ant-1", "mock-think:high"],
               "defaultThinkingLevel": "low"})
        .to_string(),
    )
    .unwrap();
    let step = |model: &Value, level: &Value| {
        format!(
            "{}/{} {}",
            model["provider"].as_str().unwrap(),
            model["id"].as_str().unwrap(),
            level.as_str().unwrap()
        )
    };
    let mut p = pi_e2e::pi_rpc::PiRpc::spawn(pi_bare_command(&pi, &ws, &agent, root));
    let state = p.request(json!({"type": "get_state"}));
    let mut theirs = vec![step(&state["model"], &state["thinkingLevel"])];
    for _ in 0..3 {
        let c = p.request(json!({"type": "cycle_model"}));
        theirs.push(step(&c["model"], &c["thinkingLevel"]));
    }
    p.close();
    let mut c = pi_e2e::lsp_client::LspClient::start(
        &pi_lsp_bin(),
        &ws,
        &env,
        pi_e2e::lsp_client::EditorBehavior::default(),
    )
    .await;
    let s = c.request("agent/session/new", json!({})).await.unwrap();
    let sid = s["sessionId"].as_str().unwrap().to_string();
    let mut ours = vec![step(&s["model"], &s["thinkingLevel"])];
    for _ in 0..3 {
        let r = c
            .request("agent/model/cycle", json!({"sessionId": sid}))
            .await
            .unwrap();
        ours.push(step(&r["model"], &r["thinkingLevel"]));
    }
    assert_eq!(ours, theirs);
    assert_eq!(
        ours,
        [
            "mockant/mock-ant-1 off",
            "mock/mock-think high",
            "mockant/mock-ant-1 off",
            "mock/mock-think high",
        ]
    );
    let back = c
        .request(
            "agent/model/cycle",
            json!({"sessionId": sid, "direction": "backward"}),
        )
        .await
        .unwrap();
    assert_eq!(
        step(&back["model"], &back["thinkingLevel"]),
        "mockant/mock-ant-1 off"
    );
    assert!(c.shutdown().await.success());
}

/// A run nobody chose a model for starts at the first model of settings' `enabledModels`, as
/// Pi 1.6.0's print mode does (no default model set: not the first usable model, the chat
/// completions one): both ask the Anthropic model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enabled_models_choose_the_startup_model_as_pi() {
    let Some(pi) = pi16_bin("enabled_models_choose_the_startup_model_as_pi") else {
        return;
    };
    let (theirs, ours) = both(
        &pi,
        "pi16img-scope-start",
        three_models,
        json!({"enabledModels": ["mockant/*"]}),
        &[],
        &[Step::text("ok")],
        &["hi"],
    )
    .await;
    let model =
        |bodies: &[Value]| -> Vec<Value> { bodies.iter().map(|b| b["model"].clone()).collect() };
    assert_eq!(model(&ours), model(&theirs));
    assert_eq!(model(&ours), [json!("mock-ant-1")]);
}

/// `conversation` with each image part's data URL replaced by what it holds: `MIME WxH`
/// (the pixels decoded), the bytes themselves differing by encoder.
fn images_described(messages: Vec<Value>) -> Vec<Value> {
    use base64::Engine as _;
    let mut messages = messages;
    for m in &mut messages {
        let Some(parts) = m["content"].as_array_mut() else {
            continue;
        };
        for p in parts {
            let Some(url) = p["image_url"]["url"].as_str() else {
                continue;
            };
            let (head, data) = url.split_once(";base64,").unwrap();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap();
            let img = image::load_from_memory(&bytes).unwrap();
            p["image_url"]["url"] = json!(format!(
                "{} {}x{}",
                head.trim_start_matches("data:"),
                img.width(),
                img.height()
            ));
        }
    }
    messages
}

/// A 20×3000 PNG of one colour (the outside check's) is fitted to 13×2000 and sent as JPEG,
/// the smaller of PNG and JPEG, as Pi 1.6.0's `resizeImage` sends it, from an `@file` prompt and
/// from `read`: the same messages as Pi's, the images' type and size decoded; a 3000×20 one
/// stays PNG on both sides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resized_image_is_sent_in_the_smaller_format_as_pi() {
    let Some(pi) = pi16_bin("a_resized_image_is_sent_in_the_smaller_format_as_pi") else {
        return;
    };
    let note = |w: u32, h: u32, sw: u32, sh: u32| {
        format!(
            "[Image: original {w}x{h}, displayed at {sw}x{sh}. Multiply coordinates by {:.2} to map to original image.]",
            f64::from(w) / f64::from(sw)
        )
    };
    for (w, h, sent) in [
        (20, 3000, "image/jpeg 13x2000"),
        (3000, 20, "image/png 2000x13"),
    ] {
        let files = [("big.png", solid_png(w, h))];
        let (theirs, ours) = both(
            &pi,
            "pi16img-resize-atfile",
            image_models,
            json!({}),
            &files,
            &[Step::text("ok")],
            &["--model", "mock/mock-1", "@big.png", "what"],
        )
        .await;
        let (theirs, ours) = (
            images_described(conversation(&theirs[0])),
            images_described(conversation(&ours[0])),
        );
        assert_eq!(ours, theirs, "{w}x{h} @file");
        let ws = ws_of(&json!({ "messages": ours })).unwrap();
        let (sw, sh) = if w > h { (2000, 13) } else { (13, 2000) };
        assert_eq!(
            ours,
            [json!({"role": "user", "content": [
                {"type": "text", "text": format!("<file name=\"{}\"></file>\nwhat\n\n{}",
                    ws.join("big.png").display(), note(w, h, sw, sh))},
                {"type": "image_url", "image_url": {"url": sent}}]})]
        );
        let steps = [
            Step::call("call_1", "read", json!({"path": "big.png"})),
            Step::text("ok"),
        ];
        let (theirs, ours) = both(
            &pi,
            "pi16img-resize-read",
            image_models,
            json!({}),
            &files,
            &steps,
            &["--model", "mock/mock-1", "read big.png"],
        )
        .await;
        let (theirs, ours) = (
            images_described(conversation(&theirs[1])),
            images_described(conversation(&ours[1])),
        );
        assert_eq!(ours, theirs, "{w}x{h} read");
        let mime = sent.split(' ').next().unwrap();
        assert_eq!(
            ours[2..],
            [
                json!({"role": "tool", "tool_call_id": "call_1",
                    "content": format!("Read image file [{mime}]\n{}", note(w, h, sw, sh))}),
                json!({"role": "user", "content": [
                    {"type": "text", "text": "Attached image(s) from tool result:"},
                    {"type": "image_url", "image_url": {"url": sent}}]})
            ]
        );
    }
}
