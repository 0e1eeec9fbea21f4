import type { CommonStatus, Resource } from './meta.js';

type ImageFamily = 'cos' | 'ubuntu' | 'al2' | 'al2023' | 'bottlerocket' | 'azurelinux';

export interface NodeConfigurationSpec {
  image?: string;
  imageFamily?: ImageFamily;
  /** Defaults to 100. */
  diskSizeGiB: number;
}

export type NodeConfiguration = Resource<'NodeConfiguration', NodeConfigurationSpec, CommonStatus>;
