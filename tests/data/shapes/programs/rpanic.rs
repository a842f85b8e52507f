use std::fs::File;
use std::thread;

fn main() {
    println!("loading shards");
    let worker = thread::spawn(|| {
        let _f = File::open("/data/shards/train-00001.arrow").unwrap();
    });
    let _ = worker.join();
    let v: Result<u32, String> = Err("tokenizer.json: missing field `model`".to_string());
    v.unwrap();
}
