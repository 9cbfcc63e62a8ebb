/// The version of the OfflineOData package, as `oodata --version` prints it.
///
/// It follows semantic versioning and changes with each tagged release; between releases it names
/// the release being prepared.
public enum PackageVersion {
    /// The version, for example `0.1.0`.
    public static let string = "0.1.0"
}
