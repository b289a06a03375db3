{ bench_parallel — seed 003's ParallelAllocations in Free Pascal: a list of
  task objects whose Execute allocates many objects and lists (and deletes
  them from an owning TObjectList, so the frees happen there), run serially
  and then in parallel by 1, 2, 8, 16 and 64 threads that take tasks from
  the list in turn. run.sh reports each time and the speed-up over serial. }
program bench_parallel;

{$mode objfpc}{$H+}

uses
  {$ifdef MM_SHOAL} ShoalMM, {$endif}
  {$ifdef MM_CMEM} cmem, {$endif}
  {$ifdef unix} cthreads, UnixType, Linux, {$else} Windows, {$endif} SysUtils, Classes, Contnrs;

{$i benchutil.inc}

type
  TItem = class
    Value: Int64;
    Tag: string;
  end;

  TSpeedTest = class
    Index: LongInt;
    Rounds: LongInt;
    Checksum: Int64;
    procedure Execute;
  end;

procedure TSpeedTest.Execute;
var
  List: TObjectList;
  Names: TStringList;
  Round, i: LongInt;
  Item: TItem;
begin
  for Round := 1 to Rounds do
  begin
    List := TObjectList.Create(True);
    Names := TStringList.Create;
    for i := 1 to 100 do
    begin
      Item := TItem.Create;
      Item.Value := Round * i;
      if i mod 4 = 0 then
        Item.Tag := IntToStr(Item.Value);
      List.Add(Item);
      if i mod 10 = 0 then
        Names.Add(Item.Tag);
    end;
    { TObjectList.Delete frees each item: the FreeMem traffic of seed 003 }
    while List.Count > 0 do
    begin
      Inc(Checksum, TItem(List[List.Count - 1]).Value);
      List.Delete(List.Count - 1);
    end;
    Names.Free;
    List.Free;
  end;
end;

const
  TaskCount = 64;

var
  Tasks: TObjectList;
  NextTask: LongInt;

function Worker(Arg: Pointer): PtrInt;
var
  i: LongInt;
begin
  repeat
    i := InterlockedIncrement(NextTask) - 1;
    if i >= TaskCount then
      break;
    TSpeedTest(Tasks[i]).Execute;
  until False;
  Result := 0;
end;

procedure MakeTasks(Rounds: LongInt);
var
  i: Integer;
  Task: TSpeedTest;
begin
  Tasks.Clear;
  for i := 0 to TaskCount - 1 do
  begin
    Task := TSpeedTest.Create;
    Task.Index := i;
    Task.Rounds := Rounds;
    Tasks.Add(Task);
  end;
end;

var
  Rounds: LongInt;
  i, t: Integer;
  Start: Int64;
begin
  Rounds := Scaled(400);
  Tasks := TObjectList.Create(True);

  MakeTasks(Rounds);
  Start := NowMicroseconds;
  for i := 0 to TaskCount - 1 do
    TSpeedTest(Tasks[i]).Execute;
  Report('parallel', 'serial', NowMicroseconds - Start);

  for t := Low(ThreadCounts) to High(ThreadCounts) do
  begin
    MakeTasks(Rounds);
    NextTask := 0;
    Report('parallel', 'parallel, ' + ThreadsText(ThreadCounts[t]),
      RunThreads(ThreadCounts[t], @Worker));
  end;
  Tasks.Free;
end.
