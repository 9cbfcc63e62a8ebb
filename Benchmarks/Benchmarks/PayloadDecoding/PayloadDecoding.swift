import Benchmark
import Foundation
import ODataCore
import PayloadFixtures

// package-benchmark suite: the same workload as PayloadRatio, measured with the standard
// tooling (`swift package --disable-sandbox benchmark` in Benchmarks/). PayloadRatio prints
// the in-process ratio against Foundation that docs/benchmarks.md records.
let benchmarks: @Sendable () -> Void = {
    let count = 100_000
    let bytes = Fixtures.payload(count: count)
    let data = Data(bytes)
    let model = try? Fixtures.model()
    let reader = V4JSONReader(model: model)
    let configuration = Benchmark.Configuration(metrics: [.wallClock, .throughput, .peakMemoryResident], scalingFactor: .one,
                                                maxDuration: .seconds(10), maxIterations: 5)

    Benchmark("Foundation JSONSerialization, 100k entities (baseline)", configuration: configuration) { benchmark in
        for _ in benchmark.scaledIterations {
            let object = try JSONSerialization.jsonObject(with: data)
            guard let root = object as? [String: Any], (root["value"] as? [Any])?.count == count else { fatalError("wrong shape") }
            blackHole(root)
        }
    }

    Benchmark("ODataCore V4JSONReader typed, 100k entities", configuration: configuration) { benchmark in
        for _ in benchmark.scaledIterations {
            let collection = try reader.readCollection(bytes, entityType: "Bench.Product")
            guard collection.entities.count == count else { fatalError("wrong count") }
            blackHole(collection)
        }
    }
}
